"""Placement on a real, simulated multi-node Ray cluster (``ray.cluster_utils.Cluster``):
three nodes of 2 CPUs each.  The placement strategies put fragment replicas
where they say; replicas on different nodes exchange data; and a request the
cluster cannot meet fails within seconds, naming what was asked and what the
cluster offers, instead of hanging."""

from __future__ import annotations

import time

import pytest
import torch

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group  # noqa: E402
from sim_helpers import NUM_ENVS, NUM_STEPS, small_config, wait_until_idle  # noqa: E402

import fragments  # noqa: E402
from cluster import PLACEMENT_TIMEOUT_S, RayRuntime, loopback_only  # noqa: E402
from msrl import ConfigError  # noqa: E402
from msrl.app import make_runtime, plan  # noqa: E402

NODES, CPUS_PER_NODE = 3, 2
OFFER = "cluster offers 3 node(s): 2 CPU; 2 CPU; 2 CPU"


@pytest.fixture(scope="module")
def ray_cluster():
    ray.shutdown()  # an earlier test may have started a local Ray
    with loopback_only():  # the simulated nodes talk over 127.0.0.1, not the machine's network address
        sim = Cluster(initialize_head=True, head_node_args={"num_cpus": CPUS_PER_NODE, "include_dashboard": False})
        try:
            for _ in range(NODES - 1):
                sim.add_node(num_cpus=CPUS_PER_NODE)
            sim.wait_for_nodes()
            ray.init(address=sim.address)
            assert sim.address.startswith("127.0.0.1:"), sim.address
            yield sim
        finally:
            ray.shutdown()
            sim.shutdown()


def start(policy: dict):
    """The plan and the runtime as ``msrl.train`` builds them."""
    wait_until_idle(NODES * CPUS_PER_NODE)
    run_plan = plan(small_config(policy))
    return run_plan, make_runtime(run_plan)


def live_groups() -> list[str]:
    return [pg_id for pg_id, info in placement_group_table().items() if info["state"] != "REMOVED"]


def node_ids(placement: dict[str, list[str]]) -> list[str]:
    return [node for replicas in placement.values() for node in replicas]


@pytest.mark.parametrize(
    "strategy, policy, check",
    [
        # 3 bundles of 1 CPU: 2 rollout replicas + the learner.
        pytest.param(  # spread over real hosts in tests/multihost/test_two_hosts.py
            "STRICT_SPREAD", {"actors": 2}, lambda nodes: len(set(nodes)) == 3, marks=pytest.mark.slow
        ),
        pytest.param("PACK", {"actors": 2}, lambda nodes: len(set(nodes)) <= 2, marks=pytest.mark.slow),  # best effort:
        pytest.param(
            "SPREAD", {"actors": 2}, lambda nodes: len(set(nodes)) > 1, marks=pytest.mark.slow
        ),  # weaker checks
        # STRICT_PACK: 3 replicas must fit one 2-CPU node, so the actors ask for half a CPU.
        pytest.param(
            "STRICT_PACK", {"actors": 2, "actor_cpus": 0.5}, lambda nodes: len(set(nodes)) == 1, marks=pytest.mark.slow
        ),
    ],
    ids=["STRICT_SPREAD", "PACK", "SPREAD", "STRICT_PACK"],
)
def test_replicas_are_placed_by_strategy(ray_cluster, strategy, policy, check):
    _, runtime = start({"preset": "single_learner_coarse", "placement": strategy, **policy})
    try:
        placement = runtime.placement()
        assert sorted(placement) == ["learner", "rollout"]
        assert len(placement["rollout"]) == 2 and len(placement["learner"]) == 1
        nodes = node_ids(placement)
        alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert set(nodes) <= alive
        assert check(nodes), f"{strategy} placed the replicas on {placement}"
    finally:
        runtime.close()
    assert live_groups() == []


@pytest.mark.slow  # replicas on different hosts exchange data in the default suite's tests/multihost/test_two_hosts.py
def test_replicas_on_different_nodes_exchange_data(ray_cluster):
    run_plan, runtime = start({"preset": "single_learner_coarse", "actors": 2, "placement": "STRICT_SPREAD"})
    try:
        assert len(set(node_ids(runtime.placement()))) == 3
        for _ in range(2):
            result = runtime.run_iteration()
            # Both rollout replicas stepped their half of the envs, and the learner learned on the gathered batch.
            assert result.env_steps == NUM_ENVS * NUM_STEPS
            assert isinstance(result.output, dict) and result.output
        state = runtime.state_dict()
    finally:
        runtime.close()
    # The learner's updated weights were broadcast back to both rollout replicas on the other nodes.
    recipe = run_plan.recipe
    initial = recipe.algorithm(recipe.config, fragments.run_info(recipe, None, None)).actor.state_dict()["net"]
    learned = state["_replicas"]["learner"][0]["learner"]["net"]
    assert any(not torch.equal(learned[key], initial[key]) for key in initial)
    for rollout in state["_replicas"]["rollout"]:
        actor = rollout["actor"]["net"]
        assert actor.keys() == learned.keys()
        assert all(torch.equal(actor[key], learned[key]) for key in learned)


@pytest.mark.slow  # about 15 s: two fine runs over three nodes; the suite's 6-minute budget
def test_fine_steps_across_nodes_as_calls_and_replies_train_as_one_way_deliveries(ray_cluster):
    """The learner and both env replicas on three nodes: the actions go down as calls whose replies
    bring the observations back (cluster._callreply), and the run computes what it computes with
    one-way deliveries both ways, bit for bit, seed for seed."""
    run_plan = plan(small_config({"preset": "single_learner_fine", "envs": 2, "placement": "STRICT_SPREAD"}))
    runs = {}
    for call_reply in (True, False):
        wait_until_idle(NODES * CPUS_PER_NODE)
        runtime = RayRuntime(run_plan.recipe, run_plan.fdg, call_reply=call_reply)
        try:
            assert len(set(node_ids(runtime.placement()))) == 3
            results = [runtime.run_iteration(more=i < 2) for i in range(3)]
            counts = {
                name: ray.get([handle.transport_counts.remote() for handle in handles])
                for name, handles in runtime.workers.items()
            }
        finally:
            runtime.close()
        runs[call_reply] = [(r.env_steps, r.output, r.component_metrics) for r in results]
        steps = 3 * NUM_STEPS  # actions sent per env replica, each answered by one observation batch
        if call_reply:
            assert counts["learner"] == [{"call": 2 * steps}]
            assert counts["env"] == [{"deliver": 3, "reply": steps}] * 2  # env.observe once an iteration
        else:
            assert counts["learner"] == [{"deliver": 2 * steps}]
            assert counts["env"] == [{"deliver": 3 + steps}] * 2
    assert runs[True] == runs[False]
    assert all(env_steps == NUM_ENVS * NUM_STEPS for env_steps, _, _ in runs[True])


@pytest.mark.parametrize(
    "policy, asked",
    [
        ({"preset": "multi_learner", "learners": 2, "cpus": 4}, "asks for 8 CPU in all but the cluster has 6"),
        ({"preset": "single_learner_coarse", "learner_gpus": 1}, "asks for 1 GPU in all but the cluster has 0"),
        (
            {"preset": "single_learner_coarse", "actors": 4, "placement": "STRICT_SPREAD"},
            "STRICT_SPREAD needs 5 distinct nodes",
        ),
        (
            {"preset": "single_learner_coarse", "actors": 2, "placement": "STRICT_PACK"},
            "STRICT_PACK needs 3 CPU on one node",
        ),
    ],
    ids=["cpus", "gpus", "strict-spread", "strict-pack"],
)
def test_unsatisfiable_request_fails_fast(ray_cluster, policy, asked):
    wait_until_idle(NODES * CPUS_PER_NODE)
    config = small_config(policy)
    run_plan = plan(config)
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        runtime = make_runtime(run_plan)
        runtime.close()
    elapsed = time.monotonic() - started
    assert elapsed < 10.0
    assert asked in str(info.value)
    assert OFFER in str(info.value)
    assert live_groups() == []


@pytest.mark.slow  # about 8 s: it waits out the placement timeout; the suite's 6-minute budget
def test_request_blocked_by_other_work_times_out(ray_cluster):
    blocker = placement_group([{"CPU": CPUS_PER_NODE}] * NODES, strategy="SPREAD")
    try:
        ready, _ = ray.wait([blocker.ready()], timeout=30)
        assert ready, "the blocking placement group did not become ready"
        config = small_config({"preset": "single_learner_coarse", "actors": 2})
        run_plan = plan(config)
        started = time.monotonic()
        with pytest.raises(ConfigError) as info:
            runtime = make_runtime(run_plan)
            runtime.close()
        elapsed = time.monotonic() - started
        assert PLACEMENT_TIMEOUT_S <= elapsed < 10.0
        message = str(info.value)
        assert f"could not be placed within {PLACEMENT_TIMEOUT_S:g} s" in message
        assert "3 bundles" in message and "held by other work" in message
        assert "2 CPU; 2 CPU; 2 CPU" in message
        # The group that timed out was removed: it must not grab the resources once they are freed.
        assert live_groups() == [blocker.id.hex()]
    finally:
        remove_placement_group(blocker)
