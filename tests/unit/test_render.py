"""Drawing the FDG: DOT text that Graphviz tools parse, and a PNG drawn headless.

The DOT is read back with pydot and compared with the FDG it came from: one
cluster per fragment, every dataflow node in its fragment's cluster, one bold
labelled edge per interface.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pydot
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

import fragments
from fragments import fdg_figure, fdg_to_dot, fragment_colours, write_dot, write_png
from msrl.app import load_config, plan
from msrl.core import DataflowGraph, Node, ValueKind, ValueRef
from policies import load_policy

SMALL = ["algo.num_envs=2", "algo.num_steps=4"]
TWO_FRAGMENTS = {
    "fragments": [
        {"name": "rollout", "components": ["env", "actor", "buffer"], "replicas": 2},
        {"name": "train", "components": ["learner"]},
    ]
}
# Two learner replicas: the interfaces become p2p and the learners allreduce their gradients.
TWO_LEARNERS = {
    "fragments": [
        {"name": "rollout", "components": ["env", "actor", "buffer"], "replicas": 2},
        {"name": "train", "components": ["learner"], "replicas": 2, "resources": {"CPU": 2}},
    ]
}


def fdg_for(policy):
    return plan(load_config(None, SMALL, base={"algorithm": "ppo", "policy": policy})).fdg


@pytest.fixture(scope="module")
def local():
    return fdg_for("local")


@pytest.fixture(scope="module")
def two():
    return fdg_for(TWO_FRAGMENTS)


def unquote(text: str | None) -> str | None:
    return None if text is None else text[1:-1].replace('\\"', '"') if text.startswith('"') else text


def parse(dot: str) -> pydot.Dot:
    graphs = pydot.graph_from_dot_data(dot)
    assert graphs is not None and len(graphs) == 1, dot
    return graphs[0]


def clusters(graph: pydot.Dot) -> dict[str, dict]:
    """Cluster name (without ``cluster_``) -> its label and node names."""
    found = {}
    for sub in graph.get_subgraphs():
        name = unquote(sub.get_name())
        assert name.startswith("cluster_"), name
        found[name[len("cluster_") :]] = {
            "label": unquote(sub.get("label")),
            "nodes": [
                unquote(n.get_name()) for n in sub.get_nodes() if unquote(n.get_name()) not in ("node", "graph", "edge")
            ],
        }
    return found


def labelled_edges(graph: pydot.Dot) -> list[tuple[str, str, str, str]]:
    """(source, destination, label, style) of every edge that carries a label."""
    return [
        (unquote(e.get_source()), unquote(e.get_destination()), unquote(e.get("label")), unquote(e.get("style")))
        for e in graph.get_edges()
        if e.get("label") is not None
    ]


def assert_dot_matches(fdg) -> pydot.Dot:
    graph = parse(fdg_to_dot(fdg))
    found = clusters(graph)
    assert list(found) == list(fdg.fragments)
    for name, fragment in fdg.fragments.items():
        assert found[name]["nodes"] == fragment.nodes
        spec = fragment.spec
        assert found[name]["label"].startswith(f"{name}  {spec.replicas} x  {spec.executor}  resources(")
    placed = [n for cluster in found.values() for n in cluster["nodes"]]
    assert sorted(placed) == sorted(node.name for node in fdg.graph.nodes)
    return graph


# -- DOT ---------------------------------------------------------------------------------------------------
def test_local_dot_is_one_cluster_with_every_node_and_no_interface(local):
    graph = assert_dot_matches(local)
    assert clusters(graph)["local"]["label"] == "local  1 x  cpu  resources(CPU=1)"
    assert labelled_edges(graph) == []
    # Values inside the fragment are drawn, thin; a loop node is marked.
    edges = {(unquote(e.get_source()), unquote(e.get_destination())) for e in graph.get_edges()}
    assert ("buffer.drain", "learner.learn") in edges and ("actor.act", "env.step") in edges
    labels = {unquote(n.get_name()): unquote(n.get("label")) for sub in graph.get_subgraphs() for n in sub.get_nodes()}
    assert labels["env.step"] == "env.step [loop]" and labels["buffer.drain"] == "buffer.drain"


def test_two_fragment_dot_has_one_labelled_edge_per_interface(two):
    graph = assert_dot_matches(two)
    found = clusters(graph)
    assert found["rollout"]["label"] == "rollout  2 x  cpu  resources(CPU=1)"
    assert found["train"]["label"] == "train  1 x  cpu  resources(CPU=1)"
    assert sorted(labelled_edges(graph)) == [
        ("buffer.drain", "learner.learn", "gather, per_iteration", "bold"),
        ("learner.get_weights", "actor.set_weights", "broadcast, per_iteration", "bold"),
    ]
    assert len(labelled_edges(graph)) == len(two.interfaces)


def test_allreduce_is_a_dashed_self_loop_on_the_learner():
    fdg = fdg_for(TWO_LEARNERS)
    graph = assert_dot_matches(fdg)
    assert clusters(graph)["train"]["label"] == "train  2 x  cpu  resources(CPU=2)"
    assert sorted(labelled_edges(graph)) == [
        ("buffer.drain", "learner.learn", "p2p, per_iteration", "bold"),
        ("learner.get_weights", "actor.set_weights", "p2p, per_iteration", "bold"),
        ("learner.learn", "learner.learn", "allreduce grads", "bold,dashed"),
    ]
    assert len(fdg.interfaces) == 3


def test_per_step_interfaces_get_one_edge_per_consumer():
    # env alone: everything it hands the actor and the buffer inside the loop crosses per step.
    fdg = fdg_for({"fragments": [{"name": "envs", "components": ["env"]}, {"name": "rest", "components": ["*"]}]})
    graph = assert_dot_matches(fdg)
    edges = labelled_edges(graph)
    expected = [
        (i.value.node, consumer, f"{i.op}, {i.frequency}", "bold")
        for i in fdg.interfaces
        for consumer in fdg.fragments[i.dst].nodes
        if any(ref == i.value for ref, _ in fdg.graph.node(consumer).inputs())
    ]
    assert sorted(edges) == sorted(expected)
    # env.step's observation goes to three consumers (the next act, carried; the buffer; the bootstrap
    # value) and its reward, terminated and truncated to the buffer: six edges out of four interfaces.
    assert Counter((s, d) for s, d, _, _ in edges if s == "env.step") == {
        ("env.step", "actor.act"): 1,
        ("env.step", "buffer.insert"): 4,
        ("env.step", "actor.value"): 1,
    }
    assert sum(i.value is not None and i.value.node == "env.step" for i in fdg.interfaces) == 4
    # values made inside the loop cross every step; env.observe, made before it, once per iteration
    assert {(s, label) for s, _, label, _ in edges} == {
        ("env.step", "p2p, per_step"),
        ("actor.act", "p2p, per_step"),
        ("env.observe", "p2p, per_iteration"),
    }


def test_dot_is_deterministic(two):
    again = fdg_for(TWO_FRAGMENTS)
    assert fdg_to_dot(two) == fdg_to_dot(again) == fdg_to_dot(two)


def test_awkward_names_are_quoted():
    # Names with dots, brackets, quotes, backslashes and a DOT keyword must all survive a parse.
    names = ["env.step[1]", 'say "hi"', "back\\slash", "node"]
    nodes = [
        Node(name, "call_component", ("env", f"m{i}"), (), {}, "here:1", output_kinds=(ValueKind.BATCHED,))
        for i, name in enumerate(names)
    ]
    nodes.append(Node("output", "output", None, (ValueRef(names[-1]),), {}, "here:2"))
    graph = DataflowGraph(nodes, {}, {"env": "env"})
    policy = load_policy({"name": "odd {name}", "fragments": [{"name": 'frag "one"', "components": ["*"]}]})
    fdg = fragments.partition(graph, policy)
    parsed = parse(fdg_to_dot(fdg))
    (cluster,) = parsed.get_subgraphs()
    assert cluster.get_name() == '"cluster_frag \\"one\\""'
    assert [n.get_name() for n in cluster.get_nodes()] == [
        '"env.step[1]"',
        '"say \\"hi\\""',
        '"back\\\\slash"',
        '"node"',
        '"output"',
    ]


# -- PNG ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["local", "two"])
def test_png_is_written_headless(which, request, tmp_path):
    fdg = request.getfixturevalue(which)
    path = tmp_path / "fdg.png"
    write_png(fdg, str(path))
    data = path.read_bytes()
    assert data[:4] == b"\x89PNG" and len(data) > 20_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fdg.png"]  # no .tmp left behind
    # Each fragment's node colour is painted (box interiors are flat fill).
    pixels = np.round(imread(str(path))[..., :3] * 255).astype(int).reshape(-1, 3)
    for colour in fragment_colours(fdg).values():
        light = [round(c + (255 - c) * 0.6) for c in (int(colour[i : i + 2], 16) for i in (1, 3, 5))]
        assert (np.abs(pixels - light).max(axis=1) <= 1).sum() > 500, (colour, light)


def test_png_does_not_need_pyplot(two, tmp_path):
    # matplotlib.pyplot would pick an interactive backend from the environment; the renderer never imports it.
    import sys

    before = "matplotlib.pyplot" in sys.modules
    write_png(two, str(tmp_path / "fdg.png"))
    assert ("matplotlib.pyplot" in sys.modules) == before


def test_failed_write_keeps_the_old_file(two, tmp_path, monkeypatch):
    path = tmp_path / "fdg.png"
    path.write_bytes(b"old")

    def half_then_fail(self, fname, **kwargs):
        with open(fname, "wb") as file:
            file.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        write_png(two, str(path))
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fdg.png"]


def test_write_dot_writes_the_text(two, tmp_path):
    path = tmp_path / "fdg.dot"
    write_dot(two, str(path))
    assert path.read_text(encoding="utf-8") == fdg_to_dot(two)
    assert not os.path.exists(str(path) + ".tmp")


def test_png_interface_labels_do_not_cover_each_other():
    """SEED RL's layout has edges both ways between one pair of nodes and edges that
    cross at the same midpoint; every interface label must stay readable."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = fdg_figure(fdg_for("single_learner_fine"))
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    labels = [t for t in figure.axes[0].texts if t.get_fontsize() == 8 and t.get_weight() == "bold"]
    assert len(labels) >= 4 and any("scatter" in t.get_text() for t in labels)
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            assert not a.overlaps(boxes[j]), f"{labels[i].get_text()!r} covers {labels[j].get_text()!r}"
