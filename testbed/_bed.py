"""``Testbed``: the hosts of one testbed (network namespaces on a bridge of their own), their
processes, their Ray nodes, and the faults and link costs the tests give them (the package's
docstring describes the layout)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed._delay import Relay, started_here
from testbed._netns import (
    PREFIX,
    TestbedError,
    destroy,
    head_temp,
    kill_all,
    logs_dir,
    run_ip,
    shape_link,
    unavailable,
    unshape_link,
)

__all__ = ["Testbed"]

SUBNET = "198.51.100"
"""TEST-NET-2 (RFC 5737): documentation addresses, never routed."""
FIRST_HOST = 10
RAY_PORT = 6379
DASHBOARD_PORT = 8265
_KEEP = Path("/run/msrl-testbed-keep")
"""An empty directory: in a host's own mount namespace the machine's /tmp is bound here for a
moment, while the paths that must stay visible are bound back into the private /tmp."""

# The first process of a host's PID namespace ($1 hostname, $2 1 for a private /tmp, then the paths
# under /tmp to keep): it makes the host's mounts, says so, and then only holds the namespaces that
# every command on the host joins (``nsenter``).
_HOST_INIT = r"""
set -e
hostname "$1"; private="$2"; shift 2
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
if [ "$private" = 1 ]; then
  mount --bind /tmp "$KEEP"
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  for path in "$@"; do mkdir -p "$path"; mount --bind "$KEEP/${path#/tmp/}" "$path"; done
  umount -l "$KEEP"
fi
echo ready
exec sleep infinity
"""


class Testbed:
    """``hosts`` hosts (host 0 the head) with ``cpus`` CPUs each for Ray.  ``up()`` makes the
    network and starts Ray on every host; ``down()`` (or leaving the ``with`` block) removes all."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self,
        hosts: int = 2,
        cpus: int = 2,
        name: str | None = None,
        dashboard: bool = False,
        shared: Sequence[str | os.PathLike] = (),
    ) -> None:
        if hosts < 1 or hosts > 200:
            raise ValueError(f"hosts must be 1..200, got {hosts}")
        self.hosts, self.cpus, self.dashboard = hosts, cpus, dashboard
        # directories every host sees, as a cluster's shared filesystem (NFS) would hold them
        self.shared = [os.path.realpath(path) for path in shared]
        self.name = name or f"{PREFIX}{secrets.token_hex(3)}"
        self.bridge = f"{self.name}-br"
        self.token = secrets.token_hex(32)
        self.ray: list[subprocess.Popen | None] = [None] * hosts
        self.inits: list[subprocess.Popen | None] = [None] * hosts
        self.init_pids: list[int | None] = [None] * hosts
        self.logs = logs_dir(self.name)

    # -- addresses -----------------------------------------------------------------------------------
    def namespace(self, host: int) -> str:
        return f"{self.name}-h{host}"

    def address(self, host: int) -> str:
        return f"{SUBNET}.{FIRST_HOST + host}"

    @property
    def head_address(self) -> str:
        return f"{self.address(0)}:{RAY_PORT}"

    @property
    def job_address(self) -> str:
        """Where ``ray job submit`` reaches the head (``Testbed(dashboard=True)``)."""
        return f"http://{self.address(0)}:{DASHBOARD_PORT}"

    @property
    def head_temp_dir(self) -> Path:
        """Ray's temporary directory on the head host, whose /tmp is the machine's: a directory of
        this testbed's own (a short path: Unix sockets live in it), removed by ``down``."""
        return head_temp(self.name)

    @property
    def env(self) -> dict[str, str]:
        """The environment every process of the testbed runs with: this Python's bin on PATH, the
        testbed's Ray token, and nothing that would pin Ray to loopback; ``MSRL_COMPILE`` carries
        through, so runs on the hosts compile (or stay eager) as runs here would."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("RAY_", "MSRL_")) or key == "MSRL_COMPILE"
        }
        env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        bin_dir = str(Path(sys.executable).parent)
        env.update(
            PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            RAY_USAGE_STATS_ENABLED="0",
            KEEP=str(_KEEP),
        )
        return env

    # -- life cycle ----------------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.down()

    def up(self, start_ray: bool = True, timeout_s: float = 120.0) -> Testbed:
        reason = unavailable()
        if reason:
            raise TestbedError(f"no testbed here: {reason}")
        self.logs.mkdir(parents=True, exist_ok=True)
        _KEEP.mkdir(parents=True, exist_ok=True)
        run_ip("netns", "add", self.bridge)
        run_ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        run_ip("-n", self.bridge, "link", "set", "br0", "up")
        for host in range(self.hosts):
            ns = self.namespace(host)
            run_ip("netns", "add", ns)
            run_ip("-n", self.bridge, "link", "add", f"v{host}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            run_ip("-n", self.bridge, "link", "set", f"v{host}", "master", "br0", "up")
            run_ip("-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            run_ip("-n", ns, "link", "set", "eth0", "up")
            run_ip("-n", ns, "link", "set", "lo", "up")
            self._start_host(host)
        if start_ray:
            self.start_ray(timeout_s=timeout_s)
        return self

    def down(self) -> None:
        procs = [proc for proc in (*self.ray, *self.inits, *started_here(self.bridge)) if proc is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        destroy(self.name)
        for proc in procs:
            proc.wait(timeout=30)
        self.ray, self.inits, self.init_pids = [None] * self.hosts, [None] * self.hosts, [None] * self.hosts

    # -- processes -----------------------------------------------------------------------------------
    def _start_host(self, host: int) -> None:
        """Host ``host``'s first process: its PID, UTS and mount namespaces, and its mounts."""
        keep = [p for p in (*_paths_to_keep(), *self.shared) if p.startswith("/tmp/")] if host else []
        argv = [
            *("ip", "netns", "exec", self.namespace(host)),
            *("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--uts", "--mount"),
            *("--propagation", "private"),
            *("sh", "-c", _HOST_INIT, "sh", self.namespace(host), "1" if host else "0", *keep),
        ]
        proc = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.inits[host] = proc
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            proc.kill()
            raise TestbedError(f"host {host} did not start: {proc.communicate(timeout=10)[1].strip()}")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        if len(children) != 1:
            raise TestbedError(f"host {host}: expected one first process, found {children}")
        self.init_pids[host] = int(children[0])

    def command(self, host: int, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """``argv`` as host ``host`` runs it: in the host's network, PID, UTS and mount namespaces,
        in ``cwd`` (this process's working directory by default)."""
        if self.init_pids[host] is None:
            raise TestbedError(f"host {host} of {self.name} is not running")
        target = str(self.init_pids[host])
        wd = f"--wd={cwd or os.getcwd()}"
        return ["nsenter", f"--target={target}", "--net", "--pid", "--uts", "--mount", wd, "--", *argv]

    def popen(self, host: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        env = {**self.env, **kwargs.pop("env", {})}
        return subprocess.Popen(self.command(host, argv, kwargs.pop("cwd", None)), env=env, **kwargs)

    @staticmethod
    def send_signal(proc: subprocess.Popen, signum: int) -> None:
        """Send ``signum`` to the command ``popen`` started (the child of the ``nsenter`` that entered
        its host, which does not pass signals on; it exits with its child's status)."""
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(children[0]) if children else proc.pid, signum)

    def run(self, host: int, argv: Sequence[str], timeout: float = 300, **kwargs: Any) -> subprocess.CompletedProcess:
        env = {**self.env, **kwargs.pop("env", {})}
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(host, argv, kwargs.pop("cwd", None)), env=env, timeout=timeout, **kwargs)

    def start_ray(self, hosts: Sequence[int] | None = None, timeout_s: float = 120.0, alive: int | None = None) -> None:
        """``ray start --block`` on each host (the head first), then wait until every node is alive
        (``alive`` of them, where some were never started or are gone: a host joining later)."""
        ray_bin = str(Path(sys.executable).with_name("ray"))
        for host in hosts if hosts is not None else range(self.hosts):
            common = [
                "--block",
                f"--node-ip-address={self.address(host)}",
                f"--num-cpus={self.cpus}",
                "--disable-usage-stats",
            ]
            if host == 0:
                self.head_temp_dir.mkdir(parents=True, exist_ok=True)
                dashboard = (
                    [f"--dashboard-host={self.address(0)}", f"--dashboard-port={DASHBOARD_PORT}"]
                    if self.dashboard
                    else ["--include-dashboard=false"]
                )
                argv = [ray_bin, "start", "--head", f"--port={RAY_PORT}", *dashboard, *common]
                argv.append(f"--temp-dir={self.head_temp_dir}")
            else:
                argv = [ray_bin, "start", f"--address={self.head_address}", *common]
            log = (self.logs / f"ray-h{host}.log").open("w")
            self.ray[host] = self.popen(host, argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_for_nodes(self.hosts if alive is None else alive, timeout_s)

    def wait_for_nodes(self, count: int, timeout_s: float = 120.0) -> None:
        """Until the head's GCS counts ``count`` alive nodes (asked from the head host)."""
        probe = (
            "import time, ray\n"
            f"ray.init(address={self.head_address!r}, logging_level='ERROR')\n"
            f"deadline = time.monotonic() + {timeout_s}\n"
            f"while sum(n['Alive'] for n in ray.nodes()) != {count} and time.monotonic() < deadline:\n"
            "    time.sleep(0.2)\n"
            "print(sum(n['Alive'] for n in ray.nodes()))\n"
        )
        done = self.run(0, [sys.executable, "-c", probe], timeout=timeout_s + 60)
        alive = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
        if alive != [str(count)]:
            tails = {host: self.log_tail(host) for host in range(self.hosts)}
            raise TestbedError(f"{alive or 'no'} of {count} Ray nodes alive: {done.stderr[-1500:]} logs: {tails}")

    def log_tail(self, host: int, chars: int = 800) -> str:
        path = self.logs / f"ray-h{host}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    # -- faults and costs ----------------------------------------------------------------------------
    def kill_host(self, host: int) -> None:
        """The host is lost: every process in its namespace is SIGKILLed."""
        kill_all(self.namespace(host))
        self.init_pids[host] = None

    def drain(self, host: int, deadline_s: int, reason: str = "preemption notice") -> None:
        """Ray drains the host with a deadline, as its autoscaler does before a preemption (``ray
        drain-node``, asked from the head host): nothing new is scheduled there, nothing is killed."""
        probe = (
            f"import ray\nray.init(address={self.head_address!r}, logging_level='ERROR')\n"
            f"print(next(n['NodeID'] for n in ray.nodes()\n"
            f"    if n['Alive'] and n['NodeManagerAddress'] == {self.address(host)!r}))"
        )
        found = self.run(0, [sys.executable, "-c", probe], timeout=120)
        if found.returncode:
            raise TestbedError(f"host {host} is not a live Ray node: {found.stderr[-1500:]}")
        node = found.stdout.strip().splitlines()[-1]
        ray_bin = str(Path(sys.executable).with_name("ray"))
        argv = [
            *(ray_bin, "drain-node", f"--address={self.head_address}", f"--node-id={node}"),
            *("--reason=DRAIN_NODE_REASON_PREEMPTION", f"--reason-message={reason}"),
            f"--deadline-remaining-seconds={deadline_s}",
        ]
        done = self.run(0, argv, timeout=120)
        if done.returncode:
            raise TestbedError(f"ray drain-node of host {host} failed: {done.stderr[-1500:]}")

    def set_link(self, host: int, up: bool) -> None:
        """Cut the host off the bridge (a partition) or connect it again."""
        run_ip("-n", self.bridge, "link", "set", f"v{host}", "up" if up else "down")

    def link(self, host: int) -> list[tuple[str, str]]:
        """Host ``host``'s link as its two ends (namespace, device): the bridge's side, whose queue
        holds what the host receives, and the host's ``eth0``, whose queue holds what it sends."""
        return [(self.bridge, f"v{host}"), (self.namespace(host), "eth0")]

    def shape(self, host: int, rate: str | None = None, delay: str | None = None, burst: int | None = None) -> None:
        """A link with real costs, both directions: ``shape(1, "1gbit", "0.5ms")`` (tc netem, whose
        rate paces every packet), or a rate alone, ``shape(1, "100mbit")``: a token bucket (tc tbf)
        of ``burst`` bytes, by default a millisecond of the rate and at least 64 KiB, so a message
        smaller than the bucket that finds it full passes at the veth's speed while a bulk transfer
        pays the rate (``burst=3028``, two frames, makes every message pay it).  Where the kernel has
        no sch_netem (``netem_missing()`` says why) a relay holds each frame for the delay, each way
        (``testbed/_delay.py``), and tbf gives the rate.  A packet between two shaped hosts pays both."""
        what = f"host {host}'s link ({self.namespace(host)})"
        shape_link(self.link(host), what, rate, delay, burst, Relay(self.bridge, host, self.logs))

    def unshape(self, host: int) -> None:
        """Host ``host``'s link back to no added cost."""
        unshape_link(self.link(host), Relay(self.bridge, host, self.logs))


def _paths_to_keep() -> list[str]:
    """What a worker host must still see when its /tmp is private: this Python's environment and
    the msrl sources it imports (an editable install, or a clone under /tmp)."""
    paths = {os.path.realpath(sys.prefix), str(Path(__file__).resolve().parents[1])}  # msrl's packages sit side by side
    return sorted(paths)
