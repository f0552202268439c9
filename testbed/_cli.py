"""``python -m testbed``: make a testbed (``up``), run a command on one of its hosts (``exec``),
shape a host's link (``shape``) and remove it (``down``)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence

from testbed._bed import Testbed
from testbed._netns import PREFIX, TestbedError, destroy, namespaces


def _description() -> str:
    """The first paragraph of the package's docstring."""
    import testbed

    return (testbed.__doc__ or "").split("\n\n")[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=_description())
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="make a testbed and start Ray on every host")
    up.add_argument("--hosts", type=int, default=3)
    up.add_argument("--cpus", type=int, default=2, help="CPUs each host gives Ray")
    up.add_argument("--shared", action="append", default=[], metavar="DIR", help="a directory every host sees (repeat)")
    run = sub.add_parser("exec", help="run a command on one host of a testbed")
    run.add_argument("name")
    run.add_argument("host", type=int)
    run.add_argument("argv", nargs=argparse.REMAINDER)
    shape = sub.add_parser("shape", help="give one host's link a rate and/or a delay (tc), both ways")
    shape.add_argument("name")
    shape.add_argument("host", type=int)
    shape.add_argument("--rate", help="e.g. 100mbit, 1gbit (tc tbf alone where no --delay)")
    shape.add_argument("--delay", help="one way, e.g. 2ms (tc netem; without it, a relay: testbed/_delay.py)")
    shape.add_argument("--burst", type=int, help="tc tbf's bucket in bytes (a rate without a delay)")
    shape.add_argument("--off", action="store_true", help="take the host's shaping off")
    down = sub.add_parser("down", help="remove a testbed (kill its processes, delete its namespaces)")
    down.add_argument("name", nargs="?")
    down.add_argument("--all", action="store_true", help=f"every testbed ({PREFIX}*)")
    args = parser.parse_args(argv)
    if args.command == "up":
        bed = Testbed(args.hosts, args.cpus, shared=args.shared)
        try:
            bed.up()
        except TestbedError as exc:
            bed.down()
            print(f"testbed: error: {exc}", file=sys.stderr)
            return 2
        state = {"token": bed.token, "init_pids": bed.init_pids}
        (bed.logs / "state.json").write_text(json.dumps(state))
        for host in range(bed.hosts):
            print(f"host {host}: {bed.address(host)} (namespace {bed.namespace(host)})")
        print(f"name {bed.name}; head {bed.head_address}; Ray logs and token in {bed.logs}")
        return 0
    if args.command == "exec":
        bed = Testbed(len(namespaces(f"{args.name}-h")), name=args.name)
        state = json.loads((bed.logs / "state.json").read_text())
        bed.token, bed.init_pids = state["token"], state["init_pids"]
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        return subprocess.call(bed.command(args.host, argv), env=bed.env)
    if args.command == "shape":
        hosts = len(namespaces(f"{args.name}-h"))
        if not 0 <= args.host < hosts:
            parser.error(f"testbed {args.name} has no host {args.host} (it has {hosts})")
        bed = Testbed(hosts, name=args.name)
        try:
            bed.unshape(args.host) if args.off else bed.shape(args.host, args.rate, args.delay, args.burst)
        except (TestbedError, ValueError) as exc:
            print(f"testbed: error: {exc}", file=sys.stderr)
            return 2
        return 0
    names = sorted({ns.rsplit("-", 1)[0] for ns in namespaces()}) if args.all else [args.name]
    if names == [None]:
        parser.error("down needs a name or --all")
    for name in names:
        destroy(name)
        print(f"removed {name}")
    return 0
