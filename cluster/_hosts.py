"""Which of the cluster's nodes still answer.  Ray's GCS marks a node dead only after its health
checks have failed for a while (about 15 s for a killed node, longer for a cut link), and until
then counts its resources as the cluster's.  Where a run needs to know now (a placement that does
not come, a worker that was lost), msrl asks each node itself: a TCP connection to the node's
raylet, which every node of a Ray cluster accepts, bounded by a short timeout."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Node:
    """One node the GCS lists as alive: its id, address, raylet port and total resources."""

    node_id: str
    address: str
    port: int
    resources: dict[str, float]

    @property
    def name(self) -> str:
        return f"{self.address} ({self.node_id[:8]})"


def alive_nodes() -> list[Node]:
    """The nodes the GCS counts as alive, in its order."""
    import ray

    return [
        Node(n["NodeID"], n["NodeManagerAddress"], int(n["NodeManagerPort"]), dict(n["Resources"]))
        for n in ray.nodes()
        if n.get("Alive")
    ]


def node_addresses() -> dict[str, str]:
    """Ray node id -> the node's IP address, for every node the GCS knows (alive or not)."""
    import ray

    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}


def answers(node: Node, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the node's raylet accepts a TCP connection within ``timeout_s``."""
    try:
        socket.create_connection((node.address, node.port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def silent_nodes(nodes: list[Node], timeout_s: float = PROBE_TIMEOUT_S) -> list[Node]:
    """Those of ``nodes`` that do not answer, all probed at once (so the whole takes ``timeout_s``
    at most)."""
    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
        replies = list(pool.map(lambda node: answers(node, timeout_s), nodes))
    return [node for node, ok in zip(nodes, replies) if not ok]


def answering_nodes() -> list[dict[str, float]]:
    """The total resources of each node the GCS counts as alive and that answers now: what a run
    can be placed on after a host was lost (the GCS may still count it for a while)."""
    nodes = alive_nodes()
    silent = {node.node_id for node in silent_nodes(nodes)}
    return [node.resources for node in nodes if node.node_id not in silent]


def head_address() -> str | None:
    """``host:port`` of the cluster's GCS (on its head node), or None outside a Ray run."""
    import ray

    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().gcs_address


def head_silent_for(timeout_s: float, poll_s: float = PROBE_TIMEOUT_S) -> str | None:
    """The head's address if its GCS accepts no TCP connection for ``timeout_s`` (probed every
    ``poll_s``); None as soon as it answers (a short partition that heals is no loss)."""
    address = head_address()
    if address is None:
        return None
    host, _, port = address.rpartition(":")
    node = Node("gcs", host, int(port), {})
    deadline = time.monotonic() + timeout_s
    while not answers(node, min(poll_s, max(0.1, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return address
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())) / 4)
    return None
