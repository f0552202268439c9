"""``check_feasible``: what no wait can satisfy is rejected at once, with a
message naming what was asked and what the cluster offers.  Nodes are plain
resource dicts, as ``ray.nodes()`` reports them, so no Ray is needed."""

from __future__ import annotations

import pytest

from cluster import actor_resources, bundles_of, check_feasible, demand_of, describe_placement
from msrl import ConfigError
from policies import load_policy

TWO_CPU_NODES = [{"CPU": 2.0}, {"CPU": 2.0}]


def coarse(actors: int = 2, placement: str = "PACK", **params):
    return load_policy({"preset": "single_learner_coarse", "actors": actors, "placement": placement, **params})


def test_bundles_one_per_replica_in_policy_order():
    policy = coarse(actors=3, learner_gpus=1)
    assert bundles_of(policy) == [
        ("rollout", 0, {"CPU": 1.0}),
        ("rollout", 1, {"CPU": 1.0}),
        ("rollout", 2, {"CPU": 1.0}),
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


@pytest.mark.parametrize(
    "policy, nodes",
    [
        (coarse(actors=3, placement="PACK"), TWO_CPU_NODES),  # 4 CPUs: exactly the cluster
        (coarse(actors=1, placement="STRICT_SPREAD"), TWO_CPU_NODES),
        (coarse(actors=1, placement="STRICT_PACK"), TWO_CPU_NODES),
        (coarse(actors=2, placement="SPREAD"), [{"CPU": 2.0}, {"CPU": 2.0}, {"CPU": 2.0}]),
        (
            coarse(actors=3, placement="STRICT_PACK", actor_cpus=0.5, learner_cpus=0.5),
            TWO_CPU_NODES,
        ),  # 4 x 0.5 CPU on one node
        (
            load_policy({"preset": "multi_learner", "learners": 2, "cpus": 2, "placement": "STRICT_SPREAD"}),
            TWO_CPU_NODES,
        ),
    ],
    ids=["pack-exact", "strict-spread", "strict-pack", "spread", "strict-pack-fractional", "strict-spread-full-nodes"],
)
def test_feasible_requests_pass(policy, nodes):
    assert check_feasible(policy, nodes) is None


def test_fractional_requests_are_shown_as_asked():
    policy = coarse(actors=3, actor_cpus=1.5)  # 5.5 CPUs
    with pytest.raises(ConfigError, match=r"asks for 5.5 CPU in all but the cluster has 4"):
        check_feasible(policy, TWO_CPU_NODES)


LABELLED_NODES = [
    {"CPU": 2.0, "memory": 2.0 * 2**30, "node:10.0.0.1": 1.0, "object_store_memory": 1e8},
    {"CPU": 1.0, "GPU": 1.0, "memory": 8.0 * 2**30, "learner_node": 1.0, "accelerator_type:H100": 1.0},
    {"CPU": 4.0, "memory": 4.0 * 2**30, "env_node": 4.0, "CPU_group_0_" + "ab" * 18: 1.0},
]


def labelled(learner: dict, rollout: dict | None = None):
    return load_policy(
        {
            "fragments": [
                {
                    "name": "rollout",
                    "components": ["env", "actor", "buffer"],
                    "replicas": 2,
                    "resources": rollout or {"CPU": 1, "env_node": 1},
                },
                {"name": "learner", "components": ["learner"], "resources": learner},
            ]
        }
    )


def test_custom_resources_and_memory_are_bundled_and_feasible():
    policy = labelled({"CPU": 1, "GPU": 1, "learner_node": 1, "accelerator_type:H100": 0.001, "memory": 4 * 2**30})
    assert bundles_of(policy)[-1] == (
        "learner",
        0,
        {"CPU": 1.0, "GPU": 1.0, "learner_node": 1.0, "accelerator_type:H100": 0.001, "memory": 4.0 * 2**30},
    )
    assert check_feasible(policy, LABELLED_NODES) is None


@pytest.mark.parametrize(
    "learner, asked, offer",
    [
        (
            {"CPU": 1, "gpu_node": 1},
            "asks for 1 gpu_node in all but the cluster has 0",
            "cluster offers 3 node(s): 2 CPU; 1 CPU, 1 GPU, 1 learner_node; 4 CPU, 4 env_node",
        ),
        (
            {"CPU": 2, "learner_node": 1},
            "fragment 'learner' asks for 2 CPU, 1 learner_node per replica but no node has that much",
            "cluster offers 3 node(s): 2 CPU; 1 CPU, 1 GPU, 1 learner_node; 4 CPU, 4 env_node",
        ),
        # Ray's bookkeeping resources are shown only when the policy asks for them.
        (
            {"CPU": 1, "accelerator_type:A100": 0.001},
            "asks for 0.001 accelerator_type:A100 in all but the cluster has 0",
            "cluster offers 3 node(s): 2 CPU; 1 CPU, 1 GPU, 1 accelerator_type:H100, 1 learner_node; 4 CPU, 4 env_node",
        ),
        (
            {"CPU": 1, "memory": 9 * 2**30},
            "fragment 'learner' asks for 1 CPU, 9 GiB memory per replica but no node has that much",
            "cluster offers 3 node(s): 2 CPU, 2 GiB memory; 1 CPU, 1 GPU, 8 GiB memory, 1 learner_node; "
            "4 CPU, 4 GiB memory, 4 env_node",
        ),
        (
            {"CPU": 1, "memory": 15 * 2**30},
            "asks for 15 GiB memory in all but the cluster has 14 GiB",
            "2 CPU, 2 GiB memory;",
        ),
    ],
    ids=["unknown-label", "label-without-cpus", "accelerator-type", "memory-per-node", "memory-in-all"],
)
def test_custom_resources_the_cluster_lacks(learner, asked, offer):
    with pytest.raises(ConfigError) as info:
        check_feasible(labelled(learner), LABELLED_NODES)
    message = str(info.value)
    assert asked in message and offer in message
    assert "node:" not in message and "_group_" not in message and "object_store_memory" not in message


def test_actor_resources_hold_the_bundle():
    assert actor_resources(
        {
            "CPU": 1.0,
            "GPU": 0.5,
            "memory": 2.0 * 2**30,
            "learner_node": 1.0,
            "accelerator_type:H100": 0.001,
            "env_node": 0.0,
        }
    ) == {
        "num_cpus": 1.0,
        "num_gpus": 0.5,
        "memory": 2 * 2**30,
        "resources": {"learner_node": 1.0, "accelerator_type:H100": 0.001},
    }
    assert actor_resources({"CPU": 2.0}) == {"num_cpus": 2.0, "num_gpus": 0.0}
    assert isinstance(actor_resources({"memory": 1e9})["memory"], int)


def test_placement_report_lines():
    policy = labelled({"CPU": 1, "learner_node": 1, "memory": 2**31})
    a, b = "a1b2c3d4" + "0" * 48, "e5f6a7b8" + "1" * 48
    lines = describe_placement(policy, {"rollout": [b, b], "learner": [a]}, {a: "10.0.0.5", b: "10.0.0.6"})
    assert lines == [
        "fragment rollout[0] on node 10.0.0.6 (e5f6a7b8) with 1 CPU, 1 env_node",
        "fragment rollout[1] on node 10.0.0.6 (e5f6a7b8) with 1 CPU, 1 env_node",
        "fragment learner[0] on node 10.0.0.5 (a1b2c3d4) with 1 CPU, 2 GiB memory, 1 learner_node",
    ]
