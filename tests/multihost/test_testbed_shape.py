"""Links with costs on the testbed (``Testbed.shape``): a rate alone is a token bucket (tc tbf) that a
bulk TCP transfer between two hosts pays, both ways; a delay (tc netem, or on a kernel without
sch_netem a relay that holds each frame: testbed/_delay.py) raises the round trip by twice what was
asked, lets a bulk transfer through, and leaves nothing behind.  No Ray here: the hosts' network is
all these tests need, so each takes a few seconds."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from multihost_helpers import REPO

from testbed import PROBE_CLIENT, PROBE_SERVER, Relay, Testbed, namespace_pids, namespaces, netem_missing

PORT = 5301


@pytest.fixture
def bed() -> Iterator[Testbed]:
    """Two hosts with their network and no Ray; afterwards nothing of them is left, and the machine's
    own namespace has no link more than before."""
    root = root_links()
    bed = Testbed(hosts=2, cpus=1)
    try:
        bed.up(start_ray=False)
        yield bed
    finally:
        bed.down()
    assert namespaces(bed.name) == []
    assert all(namespace_pids(f"{bed.name}-h{host}") == [] for host in range(2))
    assert not list(Path("/tmp").glob(f"{bed.name}-*"))
    assert root_links() == root


def root_links() -> set[str]:
    """The names of the machine's own namespace's links."""
    shown = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(": ")[1].split("@")[0] for line in shown.splitlines()}


def exchange(bed: Testbed, sender: int, receiver: int, mode: str, n: int) -> list[float]:
    """Run the client on ``sender`` against the server on ``receiver``; the client's seconds."""
    address = bed.address(receiver)
    server = bed.popen(
        receiver, [sys.executable, "-c", PROBE_SERVER, address, str(PORT), mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        done = bed.run(
            sender, [sys.executable, "-c", PROBE_CLIENT, address, str(PORT), mode, str(n)], cwd=str(REPO), timeout=60
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


def bridge_links(bed: Testbed) -> dict[str, str]:
    """The bridge namespace's links: name -> the bridge it is on ("" when on none)."""
    shown = subprocess.run(["ip", "-n", bed.bridge, "-o", "link", "show"], capture_output=True, text=True).stdout
    links = {}
    for line in shown.splitlines():
        name = line.split(": ")[1].split("@")[0]
        links[name] = line.split(" master ")[1].split()[0] if " master " in line else ""
    return links


UNSHAPED = {"lo": "", "br0": "", "v0": "br0", "v1": "br0"}


def relay_pid(bed: Testbed, host: int) -> int | None:
    return Relay(bed.bridge, host, bed.logs).pid()


def test_a_delay_raises_the_round_trip_by_what_was_asked(bed: Testbed) -> None:
    # The fastest of 30 round trips: what the link costs, with little of what a busy machine adds
    # (the medians of a loaded run varied by several milliseconds).
    before = min(exchange(bed, 0, 1, "ping", 30))
    bed.shape(1, delay="5ms")  # each way crosses host 1's link once: +10 ms a round trip
    if netem_missing():  # the relay holds the frames; host 1's end is off the bridge, the relay's pair on it
        assert relay_pid(bed, 1) is not None
        assert bridge_links(bed) == {**UNSHAPED, "v1": "", "d1": "", "b1": "br0"}
    else:
        assert "netem" in qdiscs(bed, 1)
    after = min(exchange(bed, 0, 1, "ping", 30))
    # 2 x 5 ms, plus the relay's hand-offs and wake-ups (0.1-0.4 ms here), less netem's timer
    # slack (a quiet run once measured 9.59 ms): not 5 ms, not 20
    assert 0.009 < after - before < 0.0125, (before, after)


def test_a_delay_from_the_command_line_outlives_the_command_and_unshape_takes_it_off(bed: Testbed) -> None:
    cli = [sys.executable, "-m", "testbed", "shape", bed.name, "1", "--delay", "2ms"]
    done = subprocess.run(cli, cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = relay_pid(bed, 1)
    assert (pid is not None) == bool(netem_missing())  # the relay outlives the command that started it
    assert 0.0038 < min(exchange(bed, 0, 1, "ping", 20)) < 0.0065
    bed.unshape(1)  # here, not the process that started it: found by its pid file
    assert relay_pid(bed, 1) is None and not (pid and Path(f"/proc/{pid}").exists())
    assert bridge_links(bed) == UNSHAPED and "netem" not in qdiscs(bed, 1)
    assert min(exchange(bed, 0, 1, "ping", 20)) < 0.002


def test_a_bulk_transfer_crosses_a_delayed_link_both_ways_at_its_rate(bed: Testbed) -> None:
    # TCP hands the veth 64 KiB segments (GSO) with their checksums left to the device: the relay
    # must pass them whole, or the transfer stalls (the exchange's 60 s timeout).
    nbytes, rate = 4_000_000, 20e6
    bed.shape(1, delay="5ms")
    assert exchange(bed, 0, 1, "bulk", nbytes)[0] < 10.0  # 0.1 s here
    bed.shape(1, "20mbit", "5ms")  # shaped again: one relay, replaced
    wire = nbytes * 8 / rate
    for sender, receiver in ((0, 1), (1, 0)):
        seconds = exchange(bed, sender, receiver, "bulk", nbytes)[0]
        assert 0.9 * wire < seconds < 6 * wire, (sender, seconds, wire)


def test_unshape_and_down_leave_no_relay_and_no_link_of_it(request: pytest.FixtureRequest) -> None:
    if not netem_missing():
        pytest.skip("this kernel has sch_netem: a delay is a qdisc, no relay")
    bed: Testbed = request.getfixturevalue("bed")
    bed.shape(1, "50mbit", "2ms")  # the rate from tbf on both ends, as without a delay; the delay relayed
    shown = qdiscs(bed, 1)
    assert shown.count("qdisc tbf") == 2 and shown.count("rate 50Mbit") == 2 and "netem" not in shown, shown
    first = relay_pid(bed, 1)
    with pytest.raises(ValueError, match="not a tc delay"):  # bad input: refused, the link left as it was
        bed.shape(1, "50mbit", "2 parsecs")
    assert relay_pid(bed, 1) == first and first is not None
    bed.unshape(1)
    assert relay_pid(bed, 1) is None and not Path(f"/proc/{first}").exists()
    assert bridge_links(bed) == UNSHAPED and "tbf" not in qdiscs(bed, 1)
    bed.shape(0, delay="1ms")
    bed.shape(1, delay="1ms")
    pids = [relay_pid(bed, 0), relay_pid(bed, 1)]
    assert None not in pids and set(bridge_links(bed)) == {*UNSHAPED, "d0", "b0", "d1", "b1"}
    assert 0.0038 < min(exchange(bed, 0, 1, "ping", 20)) < 0.0065  # 4 x 1 ms: both links, both ways
    bed.down()  # and the fixture checks that nothing of the testbed is left
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
