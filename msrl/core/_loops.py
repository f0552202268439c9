"""Fold the two traced iterations of each ``msrl.steps`` loop into one body.

Iteration 1 must make the same calls from the same lines as iteration 0.  Where
iteration 1 reads a value that iteration 0 produced while iteration 0 read
something from before the loop, the value is loop-carried (``obs``): the
argument becomes ``CarryRef(init=<pre-loop value>, update=<body value>)``.
Uses after the loop of values made inside it refer to the last iteration.
Finally nodes get stable, readable names (``env.step``, ``actor.act_1``).
"""

from __future__ import annotations

from typing import Any

from msrl.core._errors import TraceError
from msrl.core._graph import CarryRef, LoopRegion, Node, ValueRef, map_leaves
from msrl.core._vocab import Op


def fold_loops(nodes: list[Node], loops: list[dict[str, Any]]) -> tuple[list[Node], dict[str, LoopRegion]]:
    by_name = {node.name: node for node in nodes}
    last_iteration: dict[str, str] = {}  # iteration-1 node -> its iteration-0 twin
    first_iteration: set[str] = set()
    regions: dict[str, LoopRegion] = {}
    for loop in loops:
        body0, body1 = loop["bodies"]
        _check_same_calls(loop, body0, body1, by_name)
        twins = dict(zip(body1, body0))
        for name0, name1 in zip(body0, body1):
            node0, node1 = by_name[name0], by_name[name1]
            merge = _Merger(set(body0), twins, node0.site)
            node0.args = merge(node0.args, node1.args)
            node0.kwargs = merge(node0.kwargs, node1.kwargs)
            node0.region = loop["id"]
        last_iteration.update(twins)
        first_iteration.update(body0)
        regions[loop["id"]] = LoopRegion(loop["id"], loop["trip_count"], list(body0), loop["site"])

    in_body = set(first_iteration)
    kept = [node for node in nodes if node.name not in last_iteration]
    for node in kept:
        if node.name in in_body:
            continue

        def after_loop(leaf: Any, node: Node = node) -> Any:
            if isinstance(leaf, ValueRef) and leaf.node in last_iteration:
                return ValueRef(last_iteration[leaf.node], leaf.index)
            if isinstance(leaf, ValueRef) and leaf.node in in_body:
                raise TraceError(
                    "a value from the first iteration of an msrl.steps() loop is used after the loop; "
                    "only the last iteration's values are available there",
                    node.site,
                )
            return leaf

        node.args = map_leaves(after_loop, node.args)
        node.kwargs = map_leaves(after_loop, node.kwargs)
    return _rename(kept, regions)


def _check_same_calls(loop: dict[str, Any], body0: list[str], body1: list[str], by_name: dict[str, Node]) -> None:
    calls0 = [(by_name[n].target, by_name[n].site) for n in body0]
    calls1 = [(by_name[n].target, by_name[n].site) for n in body1]
    if calls0 != calls1:
        raise TraceError(
            "the msrl.steps() loop makes different component calls in different iterations "
            "(Python control flow on the iteration?); every iteration must make the same calls",
            loop["site"],
        )


class _Merger:
    """Walks iteration 0's and iteration 1's arguments of one call side by side."""

    def __init__(self, body0: set[str], twins: dict[str, str], site: str) -> None:
        self.body0 = body0
        self.twins = twins
        self.site = site

    def __call__(self, first: Any, second: Any) -> Any:
        if isinstance(first, (tuple, list)) and type(first) is type(second) and len(first) == len(second):
            return type(first)(self(a, b) for a, b in zip(first, second))
        if isinstance(first, dict) and isinstance(second, dict) and first.keys() == second.keys():
            return {key: self(first[key], second[key]) for key in first}
        if isinstance(second, ValueRef) and second.node in self.twins:
            # Iteration 1 reads a value it made itself: iteration 0 must read its own twin.
            if first == ValueRef(self.twins[second.node], second.index):
                return first
        elif isinstance(second, ValueRef) and second.node in self.body0:
            # Iteration 1 reads what iteration 0 made: a loop-carried value.
            if not (isinstance(first, ValueRef) and first.node in self.body0):
                return CarryRef(init=first, update=second)
        elif first == second and type(first) is type(second):
            return first
        raise TraceError(
            f"an argument differs between loop iterations ({first!r} then {second!r}); arguments inside "
            "msrl.steps() must be values from components or constants that do not depend on the iteration",
            self.site,
        )


def _rename(nodes: list[Node], regions: dict[str, LoopRegion]) -> tuple[list[Node], dict[str, LoopRegion]]:
    """Give nodes names from what they call, numbered in call order: stable across traces."""
    counts: dict[str, int] = {}
    names: dict[str, str] = {}
    for node in nodes:
        if node.op is Op.OUTPUT:
            names[node.name] = "output"
            continue
        base = ".".join(node.target) if node.op is Op.CALL_COMPONENT else node.target.__name__
        count = counts.get(base, 0)
        counts[base] = count + 1
        names[node.name] = base if count == 0 else f"{base}_{count}"

    def rename_ref(leaf: Any) -> Any:
        if isinstance(leaf, ValueRef):
            return ValueRef(names[leaf.node], leaf.index)
        if isinstance(leaf, CarryRef):
            return CarryRef(rename_ref(leaf.init), rename_ref(leaf.update))
        return leaf

    for node in nodes:
        node.name = names[node.name]
        node.args = map_leaves(rename_ref, node.args)
        node.kwargs = map_leaves(rename_ref, node.kwargs)
        node.meta.pop("iteration", None)
    for region in regions.values():
        region.nodes = [names[n] for n in region.nodes]
    return nodes, regions
