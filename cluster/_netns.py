"""The network-namespace plumbing of ``cluster.testbed``: whether namespaces can be made here, and
finding, killing and deleting a testbed's namespaces by the names it made."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

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
