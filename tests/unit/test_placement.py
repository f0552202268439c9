"""``check_feasible``: what no wait can satisfy is rejected at once, with a
message naming what was asked and what the cluster offers.  Nodes are plain
resource dicts, as ``ray.nodes()`` reports them, so no Ray is needed."""

from __future__ import annotations

import pytest

from cluster import bundles_of, check_feasible, demand_of
from msrl import ConfigError
from policies import load_policy

TWO_CPU_NODES = [{"CPU": 2.0}, {"CPU": 2.0}]


def coarse(actors: int = 2, placement: str = "PACK", **params):
    return load_policy({"preset": "single_learner_coarse", "actors": actors, "placement": placement, **params})


def test_bundles_one_per_replica_in_policy_order():
    policy = coarse(actors=3, learner_gpus=1)
    assert bundles_of(policy) == [
        ("rollout", 0, {"CPU": 1.0}), ("rollout", 1, {"CPU": 1.0}), ("rollout", 2, {"CPU": 1.0}),
        ("learner", 0, {"CPU": 1.0, "GPU": 1.0}),
    ]
    assert demand_of(policy) == {"CPU": 4.0, "GPU": 1.0}


def test_too_many_cpus_names_the_request_and_the_offer():
    policy = load_policy({"preset": "multi_learner", "learners": 3, "cpus": 2})
    nodes = [{"CPU": 2.0, "memory": 1e9, "node:10.0.0.1": 1.0}, {"CPU": 2.0, "object_store_memory": 1e8}]
    with pytest.raises(ConfigError) as info:
        check_feasible(policy, nodes)
    message = str(info.value)
    assert "policy 'multi_learner' asks for 6 CPU in all but the cluster has 4" in message
    assert "cluster offers 2 node(s): 2 CPU; 2 CPU" in message
    # Ray's bookkeeping resources are not part of the offer shown to the user.
    assert "memory" not in message and "node:" not in message


def test_gpu_request_on_a_cpu_only_cluster():
    with pytest.raises(ConfigError) as info:
        check_feasible(coarse(learner_gpus=1), TWO_CPU_NODES)
    message = str(info.value)
    assert "asks for 1 GPU in all but the cluster has 0" in message
    assert "cluster offers 2 node(s): 2 CPU; 2 CPU" in message


def test_gpu_request_is_feasible_on_a_node_with_a_gpu():
    check_feasible(coarse(learner_gpus=1), [{"CPU": 2.0}, {"CPU": 2.0, "GPU": 1.0}])
    check_feasible(load_policy({"preset": "gpu_only", "cpus": 2}), [{"CPU": 4.0, "GPU": 1.0}])


def test_a_replica_larger_than_any_node():
    # 4 CPUs in all fit the cluster's 6, but no node holds a 3-CPU replica.
    policy = load_policy({"preset": "single_learner_fine", "envs": 1, "env_cpus": 3})
    with pytest.raises(ConfigError) as info:
        check_feasible(policy, [{"CPU": 2.0}] * 3)
    message = str(info.value)
    assert "fragment 'env' asks for 3 CPU per replica but no node has that much" in message
    assert "cluster offers 3 node(s): 2 CPU; 2 CPU; 2 CPU" in message


def test_strict_spread_needs_a_node_per_replica():
    policy = coarse(actors=2, placement="STRICT_SPREAD")  # 3 bundles of 1 CPU; 4 CPUs on 2 nodes
    with pytest.raises(ConfigError) as info:
        check_feasible(policy, TWO_CPU_NODES)
    message = str(info.value)
    assert "STRICT_SPREAD needs 3 distinct nodes" in message and "the cluster has 2" in message
    assert "cluster offers 2 node(s)" in message
    check_feasible(policy, [{"CPU": 1.0}] * 3)


def test_strict_spread_needs_nodes_that_each_hold_a_replica():
    # Two 2-CPU replicas, two nodes, 5 CPUs in all, and the big node could take
    # either replica; but the small node takes neither, so they cannot be on
    # two different nodes.  No wait makes this placeable: it must fail at once,
    # not after the placement timeout with "held by other work".
    policy = load_policy({"preset": "multi_learner", "learners": 2, "cpus": 2, "placement": "STRICT_SPREAD"})
    with pytest.raises(ConfigError, match="STRICT_SPREAD"):
        check_feasible(policy, [{"CPU": 4.0}, {"CPU": 1.0}])


def test_strict_pack_needs_everything_on_one_node():
    policy = coarse(actors=2, placement="STRICT_PACK")  # 3 CPUs in all, each node has 2
    with pytest.raises(ConfigError) as info:
        check_feasible(policy, TWO_CPU_NODES)
    message = str(info.value)
    assert "STRICT_PACK needs 3 CPU on one node but no node has that much" in message
    assert "cluster offers 2 node(s): 2 CPU; 2 CPU" in message
    check_feasible(policy, [{"CPU": 2.0}, {"CPU": 3.0}])


@pytest.mark.parametrize("policy, nodes", [
    (coarse(actors=3, placement="PACK"), TWO_CPU_NODES),  # 4 CPUs: exactly the cluster
    (coarse(actors=1, placement="STRICT_SPREAD"), TWO_CPU_NODES),
    (coarse(actors=1, placement="STRICT_PACK"), TWO_CPU_NODES),
    (coarse(actors=2, placement="SPREAD"), [{"CPU": 2.0}, {"CPU": 2.0}, {"CPU": 2.0}]),
    (coarse(actors=3, placement="STRICT_PACK", actor_cpus=0.5, learner_cpus=0.5), TWO_CPU_NODES),  # 4 x 0.5 CPU on one node
    (load_policy({"preset": "multi_learner", "learners": 2, "cpus": 2, "placement": "STRICT_SPREAD"}), TWO_CPU_NODES),
], ids=["pack-exact", "strict-spread", "strict-pack", "spread", "strict-pack-fractional", "strict-spread-full-nodes"])
def test_feasible_requests_pass(policy, nodes):
    assert check_feasible(policy, nodes) is None


def test_fractional_requests_are_shown_as_asked():
    policy = coarse(actors=3, actor_cpus=1.5)  # 5.5 CPUs
    with pytest.raises(ConfigError, match=r"asks for 5.5 CPU in all but the cluster has 4"):
        check_feasible(policy, TWO_CPU_NODES)
