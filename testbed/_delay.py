"""A link delay without the kernel's netem: a userspace relay in the path of one testbed host's link.

In the bridge's namespace the host's end ``vI`` leaves the bridge, a second veth pair ``dI``/``bI``
is made whose ``bI`` joins the bridge, and a relay (``python testbed/_delay.py vI dI SECONDS``:
this module, run as a script in that namespace) forwards every Ethernet frame between ``vI`` and
``dI`` through AF_PACKET sockets, each released ``SECONDS`` after the relay read it, in the order
it came; so each direction pays the delay once, as netem on both ends of the veth pair would (a
ping's round trip rises by twice it).  It learns how late its timed wake-ups come, wakes that
much early and spins the rest, so a frame leaves within microseconds of its time and never before
it (what the relay costs: ``benchmarks.relay_cost``).  The sockets carry a virtio-net header
(``PACKET_VNET_HDR``): a TCP segment the
sender left unsegmented (GSO, up to 64 KiB) and its checksum left to the hardware pass as they came,
so nothing has to turn the veths' offloads off.  A rate stays tc tbf's, on the same ends as without
the relay (the relay's sends to ``vI`` go through ``vI``'s queue).

The relay is started, stopped and found by its pid (a file in the testbed's log directory, checked
against ``ip netns pids`` of the bridge's namespace), never by name; it lives in the bridge's
namespace, so the testbed's ``down`` (which kills every process there by pid) ends it too.  It
runs at a real-time priority where it may, as netem's timers would (the kernel's softirq), so the
busy machine's other work delays its frames less.  Only the standard library: it runs as a script.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # <asm-generic/socket.h>; not in Python's socket module's stubs
BUFFER = 1 << 18
"""Largest frame read, virtio-net header included (a GSO frame is at most 64 KiB on a veth)."""
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_STARTED: dict[int, tuple[str, subprocess.Popen]] = {}
"""Relays this process started (pid -> bridge namespace, process), so that stopping one reaps it."""


def seconds(delay: str) -> float:
    """A tc delay (``0.5ms``, ``100us``, ``2s``) in seconds."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", delay.strip())
    if not found:
        raise ValueError(f"not a tc delay: {delay!r} (e.g. 0.5ms, 2ms, 100us)")
    return float(found[1]) * _UNITS[found[2]]


def _ip(*args: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode:
        from testbed._netns import TestbedError

        raise TestbedError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Relay:
    """The relay of host ``host``'s link in testbed namespace ``bridge``; its pid and log in ``logs``."""

    def __init__(self, bridge: str, host: int, logs: Path) -> None:
        self.bridge, self.host = bridge, host
        self.outer, self.relayed, self.bridged = f"v{host}", f"d{host}", f"b{host}"
        self.pid_file = logs / f"relay-h{host}.pid"
        self.log = logs / f"relay-h{host}.log"

    def pid(self) -> int | None:
        """The running relay's pid: the one recorded, if it is still a process of the bridge's namespace."""
        from testbed._netns import namespace_pids

        try:
            pid = int(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid in namespace_pids(self.bridge) else None

    def start(self, delay: str, timeout_s: float = 30.0) -> None:
        """The link rewired through a new relay holding each frame ``delay`` (tc's form: ``2ms``); any
        relay before is stopped first."""
        from testbed._netns import TestbedError

        delay_s = seconds(delay)
        self.stop()
        br = ("-n", self.bridge)
        try:
            _ip(*br, "link", "add", self.relayed, "type", "veth", "peer", "name", self.bridged)
            for dev in (self.relayed, self.bridged):
                _ip(*br, "link", "set", dev, "up")
            self.log.parent.mkdir(parents=True, exist_ok=True)
            # run as a script by its path (-I -S: the standard library alone, nothing of the environment imported)
            argv = ["ip", "netns", "exec", self.bridge, sys.executable, "-I", "-S", str(Path(__file__).resolve())]
            with self.log.open("w") as log:
                proc = subprocess.Popen(
                    [*argv, self.outer, self.relayed, repr(delay_s)],
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    start_new_session=True,
                )
            _STARTED[proc.pid] = (self.bridge, proc)
            self.pid_file.write_text(str(proc.pid))
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
            if not ready or proc.stdout.readline().strip() != "ready":
                raise TestbedError(f"the delay relay of host {self.host} did not start: {self.log.read_text()[-500:]}")
            proc.stdout.close()
            _ip(*br, "link", "set", self.outer, "nomaster")
            _ip(*br, "link", "set", self.bridged, "master", "br0")
        except BaseException:
            self.stop(rewire=True)
            raise

    def stop(self, rewire: bool = False) -> None:
        """No relay on the link, and the host's end back on the bridge; nothing to stop is fine.
        ``rewire``: undo the wiring even where no relay was recorded (a start that failed early)."""
        recorded = self.pid_file.exists()
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30  # another process's child (the command line's): until its reaper
            while pid not in _STARTED and Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        for started, (bridge, proc) in list(_STARTED.items()):  # ours, killed or ended by itself: reaped here
            if bridge == self.bridge and (started == pid or proc.poll() is not None):
                proc.wait(timeout=30)
                del _STARTED[started]
        self.pid_file.unlink(missing_ok=True)
        if recorded or rewire:
            _ip("-n", self.bridge, "link", "del", self.relayed, check=False)  # and its peer bI with it
            _ip("-n", self.bridge, "link", "set", self.outer, "master", "br0", check=False)


def started_here(bridge: str) -> list[subprocess.Popen]:
    """The relays of testbed namespace ``bridge`` that this process started, forgotten here: for
    the testbed's ``down``, which kills and reaps them with its other processes."""
    return [_STARTED.pop(pid)[1] for pid in [p for p, (b, _) in _STARTED.items() if b == bridge]]


# -- the relay itself (run in the bridge's namespace) ---------------------------------------------------


def _open(device: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # receives nothing until bound
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)  # not what this end sends
    for option in (SO_RCVBUFFORCE, SO_SNDBUFFORCE):
        sock.setsockopt(socket.SOL_SOCKET, option, 8 << 20)
    sock.bind((device, ETH_P_ALL))
    sock.setblocking(False)
    return sock


# TCP probes of a testbed link, run on two of its hosts (its tests and benchmarks.relay_cost):
# python -c PROBE_SERVER ADDRESS PORT MODE on one, python -c PROBE_CLIENT ADDRESS PORT MODE N on the other.
# Host B: accept one connection, then either read to its end and answer one byte (bulk), or echo
# every byte back (ping).
PROBE_SERVER = r"""
import socket, sys
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
conn, _ = srv.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if sys.argv[3] == "bulk":
    while conn.recv(1 << 16):
        pass
    conn.sendall(b"k")
else:
    while data := conn.recv(1):
        conn.sendall(data)
"""
# Host A: the seconds a bulk send of N bytes takes until B has read them all, or the round trips
# of one byte, one per line.
PROBE_CLIENT = r"""
import socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n = int(sys.argv[4])
if sys.argv[3] == "bulk":
    t0 = time.perf_counter()
    conn.sendall(bytes(n))
    conn.shutdown(socket.SHUT_WR)
    assert conn.recv(1) == b"k"
    print(time.perf_counter() - t0)
else:
    for _ in range(n):
        t0 = time.perf_counter()
        conn.sendall(b"p")
        assert conn.recv(1) == b"p"
        print(time.perf_counter() - t0)
"""


def relay(devices: tuple[str, str], delay_s: float) -> None:
    """Forward frames between the two devices, each ``delay_s`` after it was read, in order, forever."""
    with contextlib.suppress(PermissionError):  # a real-time priority, as netem's timers have, where allowed
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    socks = [_open(device) for device in devices]
    waiting: list[collections.deque[tuple[float, bytes]]] = [collections.deque(), collections.deque()]
    blocked = [False, False]  # a socket whose send buffer is full: wait until it can write
    buf = bytearray(BUFFER)
    view = memoryview(buf)
    print("ready", flush=True)
    sys.stdout.close()
    early = 0.0  # how late a timed wake-up comes, on average: the wait ends that much before a frame is due
    while True:
        now = time.monotonic()
        for out, queue in enumerate(waiting):
            while queue and not blocked[out] and queue[0][0] - early <= now:
                while now < queue[0][0]:  # woken early on purpose: never release a frame before its time
                    now = time.monotonic()
                try:
                    socks[out].send(queue[0][1])
                except BlockingIOError:
                    blocked[out] = True
                    break
                except OSError:  # the qdisc dropped it (ENOBUFS) or the link is down: lost, as on a wire
                    pass
                queue.popleft()
        due = [queue[0][0] - early for out, queue in enumerate(waiting) if queue and not blocked[out]]
        wake = min(due) if due else None
        writable = [sock for out, sock in enumerate(socks) if blocked[out]]
        timeout = None if wake is None else max(wake - time.monotonic(), 0.0)
        readable, can_write, _ = select.select(socks, writable, [], timeout)
        if wake is not None and not readable and not can_write:  # a timed wake-up: learn its lateness
            late = time.monotonic() - wake
            early = min(max(early + 0.1 * (late - early), 0.0), delay_s / 2, 1e-3)
        for sock in can_write:
            blocked[socks.index(sock)] = False
        for sock in readable:
            release = time.monotonic() + delay_s
            queue = waiting[1 - socks.index(sock)]
            for _ in range(256):
                try:
                    size = sock.recv_into(buf, BUFFER, socket.MSG_TRUNC)
                except BlockingIOError:
                    break
                if size <= BUFFER:  # a larger one cannot be passed whole: dropped
                    queue.append((release, bytes(view[:size])))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python testbed/_delay.py DEVICE DEVICE SECONDS", file=sys.stderr)
        return 2
    relay((argv[0], argv[1]), float(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
