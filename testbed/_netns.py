"""The network-namespace plumbing of ``testbed``: whether namespaces can be made here, and
finding, killing and deleting a testbed's namespaces by the names it made, and giving a link a rate
and a delay (tc)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

PREFIX = "msrltb"
"""Every testbed's name starts with this, so ``down --all`` and the leftover check find them."""


class TestbedError(RuntimeError):
    """The testbed cannot be made here (not root, no iproute2...) or a step of it failed."""


def unavailable() -> str | None:
    """Why no testbed can be made on this machine, or None when one can."""
    if sys.platform != "linux":
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2, util-linux)"
    probe = f"{PREFIX}probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode:
        raise TestbedError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def namespaces(prefix: str = PREFIX) -> list[str]:
    """The network namespaces whose names start with ``prefix``."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
    return sorted(line.split()[0] for line in listed if line.startswith(prefix))


def namespace_pids(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split()]


def destroy(name: str) -> None:
    """Kill every process of testbed ``name``'s namespaces by pid, then delete them; idempotent."""
    owned = [ns for ns in namespaces(name) if ns == f"{name}-br" or ns.startswith(f"{name}-h")]
    for ns in owned:
        kill_all(ns)
    for ns in owned:
        run_ip("netns", "del", ns, check=False)
    shutil.rmtree(head_temp(name), ignore_errors=True)
    shutil.rmtree(logs_dir(name), ignore_errors=True)


def kill_all(namespace: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while pids := namespace_pids(namespace):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise TestbedError(f"processes {pids} of {namespace} outlived SIGKILL for {timeout_s:.0f} s")
        time.sleep(0.05)


def logs_dir(name: str) -> Path:
    """The Ray logs of each host's ``ray start`` and the testbed's state (token, first processes)."""
    return Path("/tmp") / f"{name}-logs"


def head_temp(name: str) -> Path:
    """Ray's temporary directory on the head host, which shares the machine's /tmp (short: Unix
    socket paths live in it)."""
    return Path("/tmp") / f"{name}-ray"


# -- link costs (tc) ---------------------------------------------------------------------------------

NETEM = "sch_netem"
"""The kernel module behind ``tc ... netem`` (delay); a rate alone needs only ``sch_tbf``."""
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


class NetemMissing(TestbedError):
    """A link delay was asked for and this kernel has no sch_netem."""


def rate_bits(rate: str) -> float:
    """A tc rate (``100mbit``, ``1gbit``, ``12.5mbps``, ``10kibit``...) in bits per second."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]i?)?(bit|bps)?", rate.strip().lower())
    if not found or float(found[1]) <= 0:
        raise ValueError(f"not a tc rate: {rate!r} (e.g. 100mbit, 1gbit, 12.5mbps)")
    number, prefix, unit = float(found[1]), found[2] or "", found[3] or "bit"
    return number * _UNITS[prefix] * (8 if unit == "bps" else 1)


@functools.cache
def netem_missing() -> str | None:
    """One line saying why no link delay can be applied here (``no sch_netem in this kernel: ...``),
    or None when ``tc netem`` works; probed once, on the loopback of a namespace of its own."""
    probe = f"{PREFIX}netem{os.getpid()}"
    run_ip("netns", "add", probe)
    try:
        argv = ["qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
        done = subprocess.run(["tc", "-n", probe, *argv], capture_output=True, text=True)
        if done.returncode == 0:
            return None
        said = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        return f"no {NETEM} in this kernel: `tc {' '.join(argv)}` failed ({said}); a rate alone still works (tc tbf)"
    finally:
        run_ip("netns", "del", probe, check=False)


class Delayer(Protocol):
    """What holds a link's frames for a delay where the kernel has no netem (``testbed._delay.Relay``)."""

    def start(self, delay: str) -> None: ...

    def stop(self) -> None: ...


def shape_link(
    ends: Sequence[tuple[str, str]],
    what: str,
    rate: str | None,
    delay: str | None,
    burst: int | None,
    relay: Delayer | None = None,
) -> None:
    """Both ``ends`` (namespace, device) of one link shaped on their egress: ``tc netem`` where a
    delay is asked for, else a token bucket (``tc tbf``) of ``burst`` bytes (default: a millisecond
    of the rate, at least 64 KiB).  A kernel without sch_netem gets the delay from ``relay`` (and
    the rate, if any, from tbf); with no relay it raises ``NetemMissing``.  Bad input or a missing
    sch_netem raises before either end is touched."""
    if rate is None and delay is None:
        raise ValueError("shape needs a rate, a delay or both")
    bits = rate_bits(rate) if rate is not None else 0.0
    relayed = False
    if delay is not None:
        if not re.fullmatch(r"\d+(\.\d+)?(us|ms|s)", delay.strip()):
            raise ValueError(f"not a tc delay: {delay!r} (e.g. 0.5ms, 2ms, 100us)")
        why = netem_missing()
        relayed = bool(why) and relay is not None
        if burst is not None and not relayed:
            raise ValueError("burst is tc tbf's bucket, for a rate without a delay; netem paces every packet")
        if why and not relayed:
            asked = f"rate {rate} and delay {delay}" if rate else f"delay {delay}"
            raise NetemMissing(f"{what}: {asked} asked for, but {why}")
    unshape_link(ends, relay)
    if delay is not None and not relayed:
        qdisc = ["netem", "delay", delay, *(("rate", rate) if rate else ())]
    elif rate is not None:
        bucket = burst if burst is not None else max(int(bits / 8 * 1e-3), 65536)
        qdisc = ["tbf", "rate", str(rate), "burst", str(bucket), "latency", "50ms"]
    else:
        qdisc = []
    for ns, dev in ends if qdisc else ():
        argv = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *qdisc]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode:
            raise TestbedError(f"{what}: {' '.join(argv)}: {done.stderr.strip()}")
    if relayed and relay is not None and delay is not None:
        relay.start(delay)


def unshape_link(ends: Sequence[tuple[str, str]], relay: Delayer | None = None) -> None:
    """Back to the device's default queue on both ends (no shaping there already is fine), and no relay."""
    if relay is not None:
        relay.stop()
    for ns, dev in ends:
        subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], capture_output=True)
