"""What does the testbed's delay relay (testbed/_delay.py) cost by itself?  Measured on a 2-host
testbed without Ray (as root, on a kernel without sch_netem, where ``Testbed.shape`` uses it).

* latency: the median round trip of 1-byte TCP ping-pongs between the two hosts with no shaping
  against a relay holding frames for 0 ms on host 1's link (each round trip crosses the relay twice),
  the two alternating ``--rounds`` times;
* CPU: the relay's run time (``/proc/PID/schedstat``) per frame it forwarded (the relay's veth
  end's packet counters), for ping-pongs (small frames) and for a bulk transfer (GSO frames of up
  to 64 KiB, passed whole), and the bulk transfer's rate with and without the relay;
* accuracy: the round trip's rise at each ``--delays`` value against twice the delay.

    python -m benchmarks.relay_cost --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from testbed import PROBE_CLIENT, PROBE_SERVER, Relay, Testbed, netem_missing

PORT = 5302


def exchange(bed: Testbed, mode: str, n: int) -> list[float]:
    """The client on host 0 against the server on host 1: its seconds (one a round trip, or the bulk's)."""
    address = bed.address(1)
    server = bed.popen(
        1, [sys.executable, "-c", PROBE_SERVER, address, str(PORT), mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        done = bed.run(0, [sys.executable, "-c", PROBE_CLIENT, address, str(PORT), mode, str(n)], timeout=120)
        if done.returncode:
            raise RuntimeError(done.stderr)
        return [float(line) for line in done.stdout.split()]
    finally:
        server.kill()
        server.wait()


def frames(bed: Testbed) -> int:
    """Frames through the relay's veth end on host 1's link (each forwarded frame crosses it once)."""
    read = ["ip", "netns", "exec", bed.bridge, "cat"]
    paths = [f"/sys/class/net/d1/statistics/{k}" for k in ("rx_packets", "tx_packets")]
    return sum(map(int, subprocess.run([*read, *paths], capture_output=True, text=True).stdout.split()))


def run_seconds(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pings", type=int, default=300, help="round trips per median")
    parser.add_argument("--delays", nargs="*", default=["0.5ms", "2ms", "5ms"], help="in ms, e.g. 0.5ms")
    args = parser.parse_args()
    if not netem_missing():
        print("relay_cost: this kernel has sch_netem: Testbed.shape uses it, not the relay", file=sys.stderr)
    bed = Testbed(hosts=2, cpus=1)
    try:
        bed.up(start_ray=False)
        rtt: dict[str, list[float]] = {"none": [], "0ms": []}
        for _ in range(args.rounds):
            for delay in rtt:
                bed.unshape(1)
                if delay != "none":
                    bed.shape(1, delay=delay)
                rtt[delay].append(statistics.median(exchange(bed, "ping", args.pings)))
        for delay, medians in rtt.items():
            print(f"round trip, {delay}: " + ", ".join(f"{1e6 * m:.0f}" for m in medians) + " us (medians)")
        passes = statistics.fmean(rtt["0ms"]) - statistics.fmean(rtt["none"])
        print(f"the relay adds {1e6 * passes / 2:.0f} us a pass (a round trip crosses it twice)")
        pid = Relay(bed.bridge, 1, bed.logs).pid()
        assert pid is not None
        for mode, n in (("ping", 2000), ("bulk", 40_000_000)):
            f0, c0 = frames(bed), run_seconds(pid)
            took = exchange(bed, mode, n)
            f1, c1 = frames(bed), run_seconds(pid)
            cpu, count = c1 - c0, f1 - f0
            rate = f", {n * 8 / took[0] / 1e9:.2f} Gbit/s, {n / count / 1e3:.1f} kB a frame" if mode == "bulk" else ""
            print(f"{mode}: {count} frames, relay CPU {1e3 * cpu:.0f} ms: {1e6 * cpu / count:.1f} us a frame{rate}")
        bed.unshape(1)
        print(f"bulk without the relay: {40e6 * 8 / exchange(bed, 'bulk', 40_000_000)[0] / 1e9:.2f} Gbit/s")
        base = statistics.median(exchange(bed, "ping", args.pings))
        for delay in args.delays:
            bed.shape(1, delay=delay)
            rise = statistics.median(exchange(bed, "ping", args.pings)) - base
            wanted = 2 * float(delay.removesuffix("ms")) * 1e-3
            print(f"delay {delay}: round trip +{1e3 * rise:.3f} ms for {1e3 * wanted:.1f} ({rise / wanted - 1:+.1%})")
    finally:
        bed.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
