"""Links with costs on the testbed (``Testbed.shape``): a rate alone is a token bucket (tc tbf) that a
bulk TCP transfer between two hosts pays, both ways; a delay (tc netem) raises the round trip by
what was asked, or, on a kernel without sch_netem, is refused with one line naming the module.  No
Ray here: the hosts' network is all these tests need, so each takes a few seconds."""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from multihost_helpers import REPO

from cluster.testbed import NetemMissing, Testbed, namespace_pids, namespaces, netem_missing

PORT = 5301
# Host B: accept one connection, then either read to its end and answer one byte (bulk), or echo
# every byte back (ping).
SERVER = r"""
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
CLIENT = r"""
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


@pytest.fixture
def bed() -> Iterator[Testbed]:
    """Two hosts with their network and no Ray; afterwards nothing of them is left."""
    bed = Testbed(hosts=2, cpus=1)
    try:
        bed.up(start_ray=False)
        yield bed
    finally:
        bed.down()
    assert namespaces(bed.name) == []
    assert all(namespace_pids(f"{bed.name}-h{host}") == [] for host in range(2))
    assert not list(Path("/tmp").glob(f"{bed.name}-*"))


def exchange(bed: Testbed, sender: int, receiver: int, mode: str, n: int) -> list[float]:
    """Run the client on ``sender`` against the server on ``receiver``; the client's seconds."""
    address = bed.address(receiver)
    server = bed.popen(
        receiver, [sys.executable, "-c", SERVER, address, str(PORT), mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        done = bed.run(
            sender, [sys.executable, "-c", CLIENT, address, str(PORT), mode, str(n)], cwd=str(REPO), timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert server.wait(timeout=30) == 0
        return [float(line) for line in done.stdout.split()]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def qdiscs(bed: Testbed, host: int) -> str:
    """``tc qdisc show`` inside the host (its eth0) and on the bridge's end of its link."""
    inside = bed.run(host, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
    bridge = subprocess.run(
        ["tc", "-n", bed.bridge, "qdisc", "show", "dev", f"v{host}"], capture_output=True, text=True
    )
    return inside + bridge.stdout


def test_a_rate_alone_slows_a_bulk_transfer_both_ways_and_unshape_removes_it(bed: Testbed) -> None:
    nbytes, rate = 4_000_000, 20e6  # 32 Mbit: 1.6 s at 20 Mbit/s, milliseconds on a bare veth
    free = exchange(bed, 0, 1, "bulk", nbytes)[0]
    bed.shape(1, "20mbit")  # no delay: tc tbf, which needs no netem
    shown = qdiscs(bed, 1)
    assert shown.count("qdisc tbf") == 2 and shown.count("rate 20Mbit") == 2, shown
    wire = nbytes * 8 / rate
    into = exchange(bed, 0, 1, "bulk", nbytes)[0]  # paced by the bridge's end (what host 1 receives)
    out_of = exchange(bed, 1, 0, "bulk", nbytes)[0]  # paced by host 1's eth0 (what it sends)
    for seconds in (into, out_of):
        # the bucket (64 KiB) passes at once; the rest pays the rate; a busy machine only adds time
        assert 0.9 * wire < seconds < 6 * wire, (seconds, wire)
    assert free < wire / 4, (free, wire)
    bed.unshape(1)
    assert "tbf" not in qdiscs(bed, 1)
    assert exchange(bed, 0, 1, "bulk", nbytes)[0] < wire / 4


def test_a_delay_raises_the_round_trip_by_what_was_asked(request: pytest.FixtureRequest) -> None:
    why = netem_missing()
    if why:
        pytest.skip(why)
    bed: Testbed = request.getfixturevalue("bed")
    before = statistics.median(exchange(bed, 0, 1, "ping", 30))
    bed.shape(1, delay="20ms")  # each way crosses one shaped end of host 1's link: +40 ms a round trip
    assert "netem" in qdiscs(bed, 1)
    after = statistics.median(exchange(bed, 0, 1, "ping", 30))
    assert abs((after - before) - 0.040) < 0.010, (before, after)


def test_without_netem_a_delay_is_refused_in_one_line_and_the_link_is_left_as_it_was(
    request: pytest.FixtureRequest,
) -> None:
    if not netem_missing():
        pytest.skip("this kernel has sch_netem: a delay is applied (the test above)")
    bed: Testbed = request.getfixturevalue("bed")
    bed.shape(1, "50mbit")
    with pytest.raises(NetemMissing) as refused:
        bed.shape(1, "100mbit", "2ms")
    said = str(refused.value)
    assert "\n" not in said and "no sch_netem in this kernel" in said, said
    assert "rate 100mbit and delay 2ms" in said and bed.namespace(1) in said, said
    assert said.endswith(netem_missing() or "")  # the same line tests skip with
    shown = qdiscs(bed, 1)
    assert shown.count("rate 50Mbit") == 2 and "netem" not in shown, shown
    # The same from the command line: exit 2 and one line.
    cli = [sys.executable, "-m", "cluster.testbed", "shape", bed.name, "1", "--delay", "2ms"]
    done = subprocess.run(cli, cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("testbed: error: ") and "sch_netem" in done.stderr and "delay 2ms" in done.stderr
