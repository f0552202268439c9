"""One placement group per run: a bundle per fragment replica, placed with the
policy's strategy.  Requests the cluster cannot meet fail within seconds with
a message naming what was asked and what the cluster offers; nothing waits
forever for resources that will never appear."""

from __future__ import annotations

import math
import re
from collections.abc import Set as AbstractSet
from typing import Any

from cluster._hosts import Node, alive_nodes, silent_nodes
from msrl.core import ConfigError, HostLostError

PLACEMENT_TIMEOUT_S = 8.0
RELEASE_TIMEOUT_S = 10.0


def bundles_of(policy: Any) -> list[tuple[str, int, dict[str, float]]]:
    """``(fragment, replica, resources)`` for every fragment replica, in policy order."""
    return [
        (spec.name, replica, {k: v for k, v in spec.resources.items() if v > 0})
        for spec in policy.fragments
        for replica in range(spec.replicas)
    ]


def check_feasible(policy: Any, nodes: list[dict[str, float]]) -> None:
    """Reject at once what no wait can satisfy, given each alive node's total resources."""
    bundles = [resources for _, _, resources in bundles_of(policy)]
    demand = demand_of(policy)
    offered = _describe_cluster(nodes, asked=set(demand))
    for key, value in sorted(demand.items(), key=lambda item: _order(item[0])):
        total = sum(node.get(key, 0.0) for node in nodes)
        if value > total + 1e-9:
            raise ConfigError(
                f"policy {policy.name!r} asks for {_fmt_amount(key, value)} in all but the cluster has "
                f"{_fmt_quantity(key, total)}; cluster offers {offered}"
            )
    for fragment, _replica, resources in bundles_of(policy):
        if not any(_fits(resources, node) for node in nodes):
            raise ConfigError(
                f"fragment {fragment!r} asks for {_fmt_resources(resources)} per replica but no node has that much; "
                f"cluster offers {offered}"
            )
    if policy.placement == "STRICT_SPREAD" and _distinct_nodes_for(bundles, nodes) < len(bundles):
        raise ConfigError(
            f"placement STRICT_SPREAD needs {len(bundles)} distinct nodes that each hold one fragment replica "
            f"({', '.join(_fmt_resources(b) for b in bundles)}) but the cluster has {len(nodes)}; "
            f"cluster offers {offered}"
        )
    if policy.placement == "STRICT_PACK" and not any(_fits(demand, node) for node in nodes):
        raise ConfigError(
            f"placement STRICT_PACK needs {_fmt_resources(demand)} on one node but no node has that much; "
            f"cluster offers {offered}"
        )


def create_placement_group(policy: Any, timeout_s: float = PLACEMENT_TIMEOUT_S) -> Any:
    """Reserve every bundle or fail: feasibility is checked first, then the group
    gets ``timeout_s`` to become ready (other jobs may hold the resources)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    before = alive_nodes()
    nodes = [node.resources for node in before]
    check_feasible(policy, nodes)
    asked = set(demand_of(policy))
    bundles = [resources or {"CPU": 0.001} for _, _, resources in bundles_of(policy)]
    group = placement_group(bundles, strategy=policy.placement, name="")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        lost = _lost_since(before)
        if lost:  # gone from the GCS meanwhile, or still counted by it but silent: name them
            rest = [node.resources for node in before if node not in lost]
            raise HostLostError(
                f"policy {policy.name!r} could not be placed within {timeout_s:g} s ({len(bundles)} bundles, "
                f"{policy.placement}): {_plural(len(lost), 'node')} {', '.join(n.name for n in lost)} "
                f"{'does' if len(lost) == 1 else 'do'} not answer (a lost host?); the nodes that answer offer "
                f"{_describe_cluster(rest, asked)}, the policy needs {_fmt_resources(demand_of(policy))}"
            )
        available = _fmt_resources(_offered(ray.available_resources(), asked))
        raise ConfigError(
            f"policy {policy.name!r} could not be placed within {timeout_s:g} s ({len(bundles)} bundles, "
            f"{policy.placement}); the resources are held by other work. Cluster offers "
            f"{_describe_cluster(nodes, asked)}, available now {available}"
        )
    return group


def _lost_since(before: list[Node]) -> list[Node]:
    """Those of ``before`` that the GCS no longer counts as alive, or that do not answer."""
    alive = {node.node_id for node in alive_nodes()}
    gone = [node for node in before if node.node_id not in alive]
    return gone + silent_nodes([node for node in before if node.node_id in alive])


def _plural(count: int, word: str) -> str:
    return word if count == 1 else f"{word}s"


def resources_in_use() -> dict[str, float]:
    """What the cluster's nodes hold for running work now (total minus available), or nothing
    when this process is not connected to Ray."""
    import ray

    if not ray.is_initialized():
        return {}
    total, available = ray.cluster_resources(), ray.available_resources()
    return {key: total[key] - available.get(key, 0.0) for key in total if not key.startswith("node:")}


def wait_until_released(baseline: dict[str, float], timeout_s: float = RELEASE_TIMEOUT_S) -> bool:
    """After a run closed: wait until the cluster holds no more than ``baseline`` (what was in use
    before the run started), so the next run is placed and timed on the same free cluster.  Ray
    frees a closed run's actors and placement group asynchronously; without this, the next run of
    ``msrl compare`` would see the previous one's CPUs still taken (and SPREAD place it on fewer nodes).
    Returns whether it happened within ``timeout_s``; other jobs may hold resources meanwhile."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        used = resources_in_use()
        if all(used.get(key, 0.0) <= baseline.get(key, 0.0) + 1e-6 for key in ("CPU", "GPU")):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def demand_of(policy: Any) -> dict[str, float]:
    total: dict[str, float] = {}
    for _, _, resources in bundles_of(policy):
        for key, value in resources.items():
            total[key] = total.get(key, 0.0) + value
    return total


def _distinct_nodes_for(bundles: list[dict[str, float]], nodes: list[dict[str, float]]) -> int:
    """How many bundles can sit on pairwise distinct nodes: a maximum bipartite matching."""
    import networkx as nx

    graph = nx.Graph()
    left = [("bundle", i) for i in range(len(bundles))]
    graph.add_nodes_from(left)
    graph.add_nodes_from(("node", j) for j in range(len(nodes)))
    graph.add_edges_from(
        (("bundle", i), ("node", j)) for i, b in enumerate(bundles) for j, n in enumerate(nodes) if _fits(b, n)
    )
    return len(nx.bipartite.maximum_matching(graph, top_nodes=left)) // 2


def _fits(resources: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(key, 0.0) + 1e-9 >= value for key, value in resources.items())


def _describe_cluster(nodes: list[dict[str, float]], asked: AbstractSet[str] = frozenset()) -> str:
    per_node = "; ".join(_fmt_resources(_offered(node, asked)) for node in nodes)
    return f"{len(nodes)} node(s): {per_node}"


def _offered(resources: dict[str, float], asked: AbstractSet[str]) -> dict[str, float]:
    """What a node (or the cluster) offers, as the user would name it: CPU, GPU and custom
    resources, without Ray's bookkeeping (node addresses, memory, accelerator types,
    placement-group shares) unless the policy asks for that kind of resource (asking
    for ``accelerator_type:A100`` shows every node's accelerator type)."""
    kinds = {_kind(key) for key in asked}
    return {
        key: value
        for key, value in resources.items()
        if _kind(key) in kinds or not (key in _BYTES or key.startswith(_HIDDEN_PREFIXES) or _GROUP_SHARE.search(key))
    }


def _kind(key: str) -> str:
    return next((prefix for prefix in _HIDDEN_PREFIXES if key.startswith(prefix)), key)


def describe_placement(policy: Any, placement: dict[str, list[str]], addresses: dict[str, str]) -> list[str]:
    """One line per fragment replica, in policy order: the node it runs on (address and short
    id) and the resources it holds, e.g.
    ``fragment learner[0] on node 10.0.0.5 (a1b2c3d4) with 1 CPU, 1 learner_node``.

    ``placement`` maps each fragment to its replicas' Ray node ids, ``addresses`` a node id to
    the node's IP address."""
    lines = []
    for spec in policy.fragments:
        held = {key: value for key, value in spec.resources.items() if value > 0}
        with_ = _fmt_resources(held) if held else "no reserved resources"
        for replica, node in enumerate(placement.get(spec.name, [])):
            lines.append(
                f"fragment {spec.name}[{replica}] on node {addresses.get(node, '?')} ({node[:8]}) with {with_}"
            )
    return lines


def _fmt_resources(resources: dict[str, float]) -> str:
    return (
        ", ".join(_fmt_amount(k, v) for k, v in sorted(resources.items(), key=lambda item: _order(item[0])))
        or "nothing"
    )


def _order(key: str) -> tuple[int, str]:
    """CPU, GPU and memory first, then the other resources by name."""
    return ({"CPU": 0, "GPU": 1, "memory": 2}.get(key, 3), key)


_HIDDEN_PREFIXES = ("node:", "accelerator_type:")
_GROUP_SHARE = re.compile(r"_group_(\d+_)?[0-9a-f]{32,}$")
"""How Ray names a placement group's share of a resource (``CPU_group_0_<id>``, ``bundle_group_<id>``)."""
_BYTES = ("memory", "object_store_memory")


def _fmt_amount(key: str, value: float) -> str:
    return f"{_fmt_quantity(key, value)} {key}"


def _fmt_quantity(key: str, value: float) -> str:
    if key in _BYTES:
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if value >= size:
                return f"{value / size:.4g} {unit}"
        return f"{_fmt(value)} bytes"
    return _fmt(value)


def _fmt(value: float) -> str:
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:g}"
