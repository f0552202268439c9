"""One placement group per run: a bundle per fragment replica, placed with the
policy's strategy.  Requests the cluster cannot meet fail within seconds with
a message naming what was asked and what the cluster offers; nothing waits
forever for resources that will never appear."""

from __future__ import annotations

import math
from typing import Any

from msrl.core import ConfigError

PLACEMENT_TIMEOUT_S = 8.0


def bundles_of(policy: Any) -> list[tuple[str, int, dict[str, float]]]:
    """``(fragment, replica, resources)`` for every fragment replica, in policy order."""
    return [(spec.name, replica, {k: v for k, v in spec.resources.items() if v > 0})
            for spec in policy.fragments for replica in range(spec.replicas)]


def check_feasible(policy: Any, nodes: list[dict[str, float]]) -> None:
    """Reject at once what no wait can satisfy, given each alive node's total resources."""
    bundles = [resources for _, _, resources in bundles_of(policy)]
    offered = _describe_cluster(nodes)
    demand = demand_of(policy)
    for key, value in sorted(demand.items()):
        total = sum(node.get(key, 0.0) for node in nodes)
        if value > total + 1e-9:
            raise ConfigError(f"policy {policy.name!r} asks for {_fmt(value)} {key} in all but the cluster has {_fmt(total)}; "
                              f"cluster offers {offered}")
    for (fragment, replica, resources) in bundles_of(policy):
        if not any(_fits(resources, node) for node in nodes):
            raise ConfigError(f"fragment {fragment!r} asks for {_fmt_resources(resources)} per replica but no node has that much; "
                              f"cluster offers {offered}")
    if policy.placement == "STRICT_SPREAD" and _distinct_nodes_for(bundles, nodes) < len(bundles):
        raise ConfigError(f"placement STRICT_SPREAD needs {len(bundles)} distinct nodes that each hold one fragment replica "
                          f"({', '.join(_fmt_resources(b) for b in bundles)}) but the cluster has {len(nodes)}; cluster offers {offered}")
    if policy.placement == "STRICT_PACK" and not any(_fits(demand, node) for node in nodes):
        raise ConfigError(f"placement STRICT_PACK needs {_fmt_resources(demand)} on one node but no node has that much; "
                          f"cluster offers {offered}")


def create_placement_group(policy: Any, timeout_s: float = PLACEMENT_TIMEOUT_S) -> Any:
    """Reserve every bundle or fail: feasibility is checked first, then the group
    gets ``timeout_s`` to become ready (other jobs may hold the resources)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    nodes = alive_node_resources()
    check_feasible(policy, nodes)
    bundles = [resources or {"CPU": 0.001} for _, _, resources in bundles_of(policy)]
    group = placement_group(bundles, strategy=policy.placement, name="")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise ConfigError(f"policy {policy.name!r} could not be placed within {timeout_s:g} s ({len(bundles)} bundles, "
                          f"{policy.placement}); the resources are held by other work. Cluster offers "
                          f"{_describe_cluster(nodes)}, available now {_fmt_resources(ray.available_resources())}")
    return group


def alive_node_resources() -> list[dict[str, float]]:
    import ray

    return [dict(node["Resources"]) for node in ray.nodes() if node.get("Alive")]


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
    graph.add_edges_from((("bundle", i), ("node", j)) for i, b in enumerate(bundles) for j, n in enumerate(nodes) if _fits(b, n))
    return len(nx.bipartite.maximum_matching(graph, top_nodes=left)) // 2


def _fits(resources: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(key, 0.0) + 1e-9 >= value for key, value in resources.items())


def _describe_cluster(nodes: list[dict[str, float]]) -> str:
    per_node = "; ".join(_fmt_resources({k: v for k, v in node.items() if k in ("CPU", "GPU")}) for node in nodes)
    return f"{len(nodes)} node(s): {per_node}"


def _fmt_resources(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if not k.startswith(_HIDDEN_PREFIXES)}
    return ", ".join(f"{_fmt(v)} {k}" for k, v in sorted(shown.items())) or "nothing"


_HIDDEN_PREFIXES = ("node:", "memory", "object_store_memory", "accelerator_type:")


def _fmt(value: float) -> str:
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:g}"
