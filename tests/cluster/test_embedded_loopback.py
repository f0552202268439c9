"""The embedded Ray instance msrl starts when no ``--address`` is given listens on
loopback only: every TCP server it opens (GCS, raylet, workers, agents) is bound to
127.0.0.1, none to 0.0.0.0 or the machine's network address."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from cluster import connect  # noqa: E402

LISTEN = "0A"


def _listeners() -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket on this machine, from /proc/net."""
    found = set()
    for name, width in (("tcp", 8), ("tcp6", 32)):
        table = Path("/proc/net") / name
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            if state != LISTEN:
                continue
            hex_ip, hex_port = local.split(":")
            raw = bytes.fromhex(hex_ip)
            if width == 8:
                address = ipaddress.IPv4Address(raw[::-1])
            else:  # four little-endian 32-bit words
                address = ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
                address = address.ipv4_mapped or address
            found.add((str(address), int(hex_port, 16)))
    return found


def test_embedded_ray_listens_onloopback_only() -> None:
    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs Linux's /proc/net to list listening sockets")
    ray.shutdown()
    before = _listeners()
    try:
        connect(None, num_cpus=2)

        @ray.remote
        class Probe:
            def address(self) -> str:
                return ray.util.get_node_ip_address()

        probe = Probe.remote()
        assert ray.get(probe.address.remote()) == "127.0.0.1"  # what workers advertise, e.g. for gloo
        opened = _listeners() - before
        assert opened, "starting Ray opened no TCP listener: the check would prove nothing"
        exposed = sorted((a, p) for a, p in opened if not ipaddress.ip_address(a).is_loopback)
        assert not exposed, f"the embedded Ray listens beyond loopback: {exposed}"
    finally:
        ray.shutdown()
