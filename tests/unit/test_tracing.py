"""Tracing ``train_step`` into a DataflowGraph: the PPO graph drawn by hand,
determinism, no side effects, and equivalence of the traced graph run by the local
runtime with eager Python.  TraceErrors are in test_tracing_errors.py."""

from __future__ import annotations

import copy
import inspect
import os

import numpy as np
import pytest
import torch

import fragments
import msrl
import msrl.core
import msrl.envs
import policies
from algorithms import ppo as ppo_module
from algorithms.ppo import PPO, PPOConfig
from msrl.app import load_config, make_runtime, plan
from msrl.core import (
    CarryRef,
    DataflowGraph,
    GraphLintError,
    ValueKind,
    ValueRef,
)

THIS_FILE = os.path.basename(__file__)
PPO_FILE = os.path.abspath(ppo_module.__file__)

EXPECTED_NODES = [
    "env.observe",
    "actor.act",
    "env.step",
    "buffer.insert",
    "actor.value",
    "buffer.drain",
    "learner.learn",
    "learner.get_weights",
    "actor.set_weights",
    "output",
]
LOOP_BODY = ["actor.act", "env.step", "buffer.insert"]


def make_ppo(num_envs: int = 4, num_steps: int = 8, **kw) -> PPO:
    kw.setdefault("num_minibatches", 4)
    return PPO(PPOConfig(num_envs=num_envs, num_steps=num_steps, **kw), msrl.RunInfo(seed=0, total_env_steps=1000))


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One intra-op thread, as the cpu executor of a 1-CPU fragment uses: fast
    on a busy 2-core box, and the same in eager and executor runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def graph() -> DataflowGraph:
    return msrl.trace(make_ppo())


def assert_identical(a, b, path: str = "") -> None:
    """Deep, bit-exact comparison of nested state (tensors, arrays, scalars)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: keys {list(a)} vs {list(b)}"
        for key in a:
            assert_identical(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a, b), f"{path}: tensors differ"
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def snapshot(algo) -> dict:
    """Deep copy of every component's state (state_dict returns live tensors)."""
    return copy.deepcopy({name: c.state_dict() for name, c in algo.components().items()})


def ppo_line(snippet: str) -> int:
    """Line number in algorithms/ppo.py of the only train_step line containing ``snippet``."""
    lines, start = inspect.getsourcelines(PPO.train_step)
    hits = [start + i for i, line in enumerate(lines) if snippet in line]
    assert len(hits) == 1, (snippet, hits)
    return hits[0]


def site_file_and_line(site: str) -> tuple[str, int]:
    path, _, line = site.rpartition(":")
    return os.path.abspath(path), int(line)


# -- the PPO graph, drawn by hand ------------------------------------------------------------------
def test_ppo_node_names_and_targets(graph):
    assert [n.name for n in graph.nodes] == EXPECTED_NODES
    assert [n.op for n in graph.nodes] == ["call_component"] * 9 + ["output"]
    assert [n.target for n in graph.nodes[:-1]] == [tuple(name.split(".")) for name in EXPECTED_NODES[:-1]]
    assert graph.output is graph.nodes[-1]
    assert graph.components == {"env": "env", "actor": "actor", "buffer": "buffer", "learner": "learner"}
    assert [n.name for n in graph.calls("actor")] == ["actor.act", "actor.value", "actor.set_weights"]
    assert [n.name for n in graph.calls("learner")] == ["learner.learn", "learner.get_weights"]


def test_ppo_loop_region(graph):
    assert list(graph.regions) == ["loop0"]
    region = graph.regions["loop0"]
    assert region.trip_count == 8
    assert region.nodes == LOOP_BODY
    assert site_file_and_line(region.site) == (PPO_FILE, ppo_line("for _ in steps("))
    for node in graph.nodes:
        assert node.region == ("loop0" if node.name in LOOP_BODY else None), node.name
    assert "loop loop0: 8 iterations of actor.act, env.step, buffer.insert" in str(graph)
    # The trip count follows the config; the body is stored once, not n times.
    g32 = msrl.trace(make_ppo(num_steps=32))
    assert g32.regions["loop0"].trip_count == 32
    assert [n.name for n in g32.nodes] == EXPECTED_NODES


def test_ppo_arguments(graph):
    obs = CarryRef(init=ValueRef("env.observe", 0), update=ValueRef("env.step", 0))
    assert graph.node("env.observe").args == ()
    assert graph.node("actor.act").args == (obs,)
    assert graph.node("env.step").args == (ValueRef("actor.act", 0),)
    assert graph.node("buffer.insert").args == (
        obs,
        ValueRef("actor.act", 0),
        ValueRef("actor.act", 1),
        ValueRef("actor.act", 2),
        ValueRef("env.step", 1),
        ValueRef("env.step", 2),
        ValueRef("env.step", 3),
    )
    # After the loop, obs is the last iteration's env.step output.
    assert graph.node("actor.value").args == (ValueRef("env.step", 0),)
    assert graph.node("buffer.drain").args == (ValueRef("actor.value", 0),)
    assert graph.node("learner.learn").args == (ValueRef("buffer.drain", 0),)
    assert graph.node("learner.get_weights").args == ()
    assert graph.node("actor.set_weights").args == (ValueRef("learner.get_weights", 0),)
    assert graph.output.args == (ValueRef("learner.learn", 0),)
    assert all(node.kwargs == {} for node in graph.nodes)


def test_ppo_data_edges(graph):
    data = {(u, v, str(d["value"]), d["carried"]) for u, v, d in graph.nx.edges(data=True) if d["kind"] == "data"}
    assert data == {
        ("env.observe", "actor.act", "%env.observe", False),
        ("env.observe", "buffer.insert", "%env.observe", False),
        ("actor.act", "env.step", "%actor.act", False),
        ("actor.act", "buffer.insert", "%actor.act", False),
        ("actor.act", "buffer.insert", "%actor.act[1]", False),
        ("actor.act", "buffer.insert", "%actor.act[2]", False),
        ("env.step", "actor.act", "%env.step", True),
        ("env.step", "buffer.insert", "%env.step", True),
        ("env.step", "buffer.insert", "%env.step[1]", False),
        ("env.step", "buffer.insert", "%env.step[2]", False),
        ("env.step", "buffer.insert", "%env.step[3]", False),
        ("env.step", "actor.value", "%env.step", False),
        ("actor.value", "buffer.drain", "%actor.value", False),
        ("buffer.drain", "learner.learn", "%buffer.drain", False),
        ("learner.learn", "output", "%learner.learn", False),
        ("learner.get_weights", "actor.set_weights", "%learner.get_weights", False),
    }


def test_ppo_loop_carried_obs(graph):
    carried = sorted(graph.loop_carried())
    assert carried == [
        ("env.step", "actor.act", ValueRef("env.step", 0)),
        ("env.step", "buffer.insert", ValueRef("env.step", 0)),
    ]
    for consumer in ("actor.act", "buffer.insert"):
        (carry,) = [a for a in graph.node(consumer).args if isinstance(a, CarryRef)]
        assert carry.init == ValueRef("env.observe", 0)
        assert carry.update == ValueRef("env.step", 0)
    assert "carry(%env.observe -> %env.step)" in str(graph.node("actor.act"))


def test_ppo_value_kinds(graph):
    kinds = {n.name: n.output_kinds for n in graph.nodes}
    assert kinds == {
        "env.observe": (ValueKind.BATCHED,),
        "actor.act": (ValueKind.BATCHED,) * 3,
        "env.step": (ValueKind.BATCHED,) * 4,
        "buffer.insert": (),
        "actor.value": (ValueKind.BATCHED,),
        "buffer.drain": (ValueKind.BATCHED,),
        "learner.learn": (ValueKind.GLOBAL,),
        "learner.get_weights": (ValueKind.GLOBAL,),
        "actor.set_weights": (),
        "output": (),
    }
    assert graph.kind_of(ValueRef("env.step", 1)) is ValueKind.BATCHED
    assert graph.kind_of(ValueRef("learner.get_weights")) is ValueKind.GLOBAL
    assert all(type(kind) is ValueKind for n in graph.nodes for kind in n.output_kinds)


def test_ppo_call_sites_point_at_algorithm_lines(graph):
    expected = {
        "env.observe": "obs = self.env.observe()",
        "actor.act": "self.actor.act(obs)",
        "env.step": "self.env.step(action)",
        "buffer.insert": "self.buffer.insert(",
        "actor.value": "self.actor.value(obs)",
        "buffer.drain": "self.buffer.drain(",
        "learner.learn": "self.learner.learn(batch)",
        "learner.get_weights": "self.learner.get_weights()",
        "actor.set_weights": "self.actor.set_weights(",
    }
    for name, snippet in expected.items():
        assert site_file_and_line(graph.node(name).site) == (PPO_FILE, ppo_line(snippet)), name
    assert graph.output.site == "train_step return"


def test_ppo_ordering_edges(graph):
    order = {(u, v) for u, v, d in graph.nx.edges(data=True) if d["kind"] == "order"}
    assert order == {
        ("env.observe", "env.step"),
        ("actor.act", "actor.value"),
        ("actor.value", "actor.set_weights"),
        ("buffer.insert", "buffer.drain"),
        ("learner.learn", "learner.get_weights"),
    }


def test_ppo_graph_lints_and_lint_can_fail(graph):
    assert graph.lint() is None
    # lint is not vacuous: the same nodes out of order break it.
    with pytest.raises(GraphLintError):
        DataflowGraph(list(reversed(graph.nodes)), graph.regions, graph.components)
    with pytest.raises(GraphLintError, match="no output node"):
        DataflowGraph(graph.nodes[:-1], graph.regions, graph.components)


def _signature(g: DataflowGraph):
    nodes = [(n.name, n.op, n.target, n.args, n.kwargs, n.region, n.output_kinds, n.site) for n in g.nodes]
    edges = sorted(
        (u, v, k, d["kind"], str(d.get("value")), d["carried"]) for u, v, k, d in g.nx.edges(keys=True, data=True)
    )
    regions = {k: (r.trip_count, r.nodes, r.site) for k, r in g.regions.items()}
    return nodes, edges, regions, str(g)


def test_tracing_is_deterministic(graph):
    algo = make_ppo()
    first, second = msrl.trace(algo), msrl.trace(algo)
    assert _signature(first) == _signature(second)
    assert _signature(first) == _signature(graph)  # a fresh instance traces the same


def test_tracing_has_no_side_effects():
    algo = make_ppo()
    before = snapshot(algo)
    obs_before = algo.env.observe().copy()
    msrl.trace(algo)
    msrl.trace(algo)
    assert_identical(snapshot(algo), before)
    np.testing.assert_array_equal(algo.env.observe(), obs_before)
    assert algo.buffer.position == 0
    assert algo.learner.updates == 0
    assert algo.learner.optimizer.state_dict()["state"] == {}
    assert list(msrl.steps(3)) == [0, 1, 2]  # no tracer is left active
    # ...and the algorithm still runs eagerly afterwards (msrl.steps is range again).
    metrics = algo.train_step()
    assert algo.learner.updates == 1 and set(metrics) >= {"policy_loss", "value_loss", "entropy"}


# -- the traced graph computes exactly what eager Python does ------------------------------------------
def test_local_runtime_matches_eager_train_step():
    iterations, num_envs, num_steps = 3, 4, 16
    overrides = [
        f"algo.num_envs={num_envs}",
        f"algo.num_steps={num_steps}",
        "algo.update_epochs=2",
        "algo.num_minibatches=4",
        f"total_env_steps={iterations * num_envs * num_steps}",
        "seed=3",
    ]
    config = load_config(None, overrides, base={"algorithm": "ppo", "policy": "local"})
    threads = torch.get_num_threads()
    try:
        # Built before the runtime starts: the cpu executor sets torch's thread
        # count, and network init (orthogonal_ -> QR) depends on it.
        eager_algo = PPO(config.algo, msrl.RunInfo(seed=3, data_seed=3, total_env_steps=config.run.total_env_steps))
        runtime = make_runtime(plan(config))
        traced_algo = runtime.algorithm
        assert eager_algo is not traced_algo
        assert_identical(snapshot(eager_algo), snapshot(traced_algo))  # same seed, same start
        try:
            traced = [runtime.run_iteration() for _ in range(iterations)]
        finally:
            runtime.close()
        eager = []
        for _ in range(iterations):
            output = eager_algo.train_step()
            # Poll component metrics as the run loop does (it resets the episode counters).
            polled = {k: v for c in eager_algo.components().values() for k, v in c.metrics().items()}
            eager.append((output, polled))
    finally:
        torch.set_num_threads(threads)

    for t, (output, polled) in zip(traced, eager):
        assert t.output == output
        assert t.component_metrics == polled
        assert t.env_steps == num_envs * num_steps
    assert "episode_return" in traced[-1].component_metrics
    assert {"env", "inference", "learn"} <= set(traced[0].timings)
    assert traced[0].output != traced[-1].output  # it really trained
    for name in ("learner", "actor", "env", "buffer"):
        assert_identical(traced_algo.components()[name].state_dict(), eager_algo.components()[name].state_dict(), name)
    for key, value in traced_algo.learner.net.state_dict().items():
        assert torch.equal(value, eager_algo.learner.net.state_dict()[key]), key


def test_partitioned_local_runtime_built_by_hand_matches_eager():
    config = PPOConfig(num_envs=4, num_steps=16, update_epochs=2, num_minibatches=4)
    recipe = fragments.BuildRecipe(PPO, config, seed=5, total_env_steps=4 * 16 * 3)
    eager_algo = PPO(config, fragments.run_info(recipe, None, None))
    declared = fragments.declare(recipe)  # nothing built: the trace needs only the components' classes
    assert all(isinstance(c, msrl.core.Declared) for c in declared.components().values())
    fdg = fragments.partition(msrl.trace(declared), policies.load_policy("local"))
    threads = torch.get_num_threads()
    try:
        runtime = fragments.LocalRuntime(recipe, fdg)
        traced_algo = runtime.algorithm
        assert_identical(snapshot(eager_algo), snapshot(traced_algo))
        outputs = [runtime.run_iteration().output for _ in range(3)]
        runtime.close()
    finally:
        torch.set_num_threads(threads)
    assert outputs == [eager_algo.train_step() for _ in range(3)]
    assert_identical(traced_algo.learner.state_dict(), eager_algo.learner.state_dict())
    assert_identical(traced_algo.actor.state_dict(), eager_algo.actor.state_dict())
