"""The *picture* of a fragmented dataflow graph that both drawings spell (``fragments._render``'s
DOT, ``fragments._render_png``'s PNG): a networkx graph of what is drawn, with every edge already
classified (a value inside a fragment, a loop-carried value, call order, an interface, an
allreduce), plus the fragment colours and titles they share, so they cannot disagree about what
the FDG is."""

from __future__ import annotations

import networkx as nx

from fragments._fdg import Fragment, FragmentedGraph
from msrl.core import Role

# matplotlib's tab10: distinct, colour-blind tolerant, and the same in DOT and PNG.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")

# Edge kinds of the picture; the first three stay inside one fragment.
VALUE, CARRY, ORDER, INTERFACE, ALLREDUCE = "value", "carry", "order", "interface", "allreduce"


def fragment_colours(fdg: FragmentedGraph) -> dict[str, str]:
    """Fragment name -> colour, by the fragment's position in the policy."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(fdg.fragments)}


def fragment_label(fragment: Fragment) -> str:
    """``rollout  2 x  cpu  resources(CPU=1)``: what a reader needs to size the fragment."""
    spec = fragment.spec
    resources = ", ".join(f"{key}={value:g}" for key, value in spec.resources.items())
    return f"{fragment.name}  {spec.replicas} x  {spec.executor}  resources({resources})"


def picture_of(fdg: FragmentedGraph) -> nx.MultiDiGraph:
    """What both renderers draw, nodes and edges in a fixed order (determinism)."""
    graph = fdg.graph
    picture = nx.MultiDiGraph()
    for row, node in enumerate(graph.nodes):
        label = node.name + (" [loop]" if node.region else "")
        picture.add_node(node.name, label=label, fragment=fdg.assignment[node.name], row=row)

    drawn: set[tuple[str, str, str]] = set()
    for node in graph.nodes:  # values and order inside a fragment; one edge per (producer, consumer, kind)
        for producer, _, data in graph.nx.in_edges(node.name, data=True):
            if fdg.assignment[producer] != fdg.assignment[node.name]:
                continue
            kind = ORDER if data["kind"] == "order" else CARRY if data["carried"] else VALUE
            if (producer, node.name, kind) not in drawn:
                drawn.add((producer, node.name, kind))
                picture.add_edge(producer, node.name, kind=kind, label="")

    for interface in fdg.interfaces:
        if interface.value is None:  # allreduce: a self-loop on the learner calls that make gradients
            for name in _learner_nodes(fdg, fdg.fragments[interface.src]):
                picture.add_edge(name, name, kind=ALLREDUCE, label="allreduce grads")
            continue
        label = f"{interface.op}, {interface.frequency}"
        for consumer in fdg.fragments[interface.dst].nodes:
            if any(ref == interface.value for ref, _ in graph.node(consumer).inputs()):
                picture.add_edge(interface.ref.node, consumer, kind=INTERFACE, label=label)
    return picture


def _learner_nodes(fdg: FragmentedGraph, fragment: Fragment) -> list[str]:
    """The fragment's ``learn`` calls, where gradients are reduced; failing that,
    every learner call; failing that, the fragment's first node."""
    graph = fdg.graph
    calls = [n for n in map(graph.node, fragment.nodes) if graph.components.get(n.component or "") is Role.LEARNER]
    learn = [n.name for n in calls if n.method == "learn"]
    return learn or [n.name for n in calls] or fragment.nodes[:1]


def tint(colour: str, white: float) -> str:
    """``colour`` mixed with ``white`` parts of white (0: unchanged, 1: white)."""
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * white):02x}" for c in channels)


def title_of(fdg: FragmentedGraph) -> str:
    policy = fdg.policy
    return f"FDG for policy '{policy.name}' (placement {policy.placement}, {policy.mode})"
