"""Custom resources and memory on a simulated multi-node Ray cluster (``ray.cluster_utils.Cluster``).

Three nodes: a head with 2 CPUs and no label, node A with 1 CPU and the custom
resource ``learner_node``, node B with 2 CPUs and ``env_node: 2``.  A custom
policy that asks for those labels puts the learner on A and both rollout replicas
on B, whatever the placement strategy would do otherwise, and each replica's actor
holds what its bundle reserved (memory included).  A request for a resource no
node has, or for more memory than a node has, fails within seconds with one line
naming it and what the cluster offers."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.placement_group import placement_group_table  # noqa: E402
from sim_helpers import CONFIG, NUM_ENVS, NUM_STEPS, small_config, wait_until_idle  # noqa: E402

from cluster import loopback_only  # noqa: E402
from msrl import ConfigError  # noqa: E402
from msrl.app import make_runtime, plan  # noqa: E402

GiB = 2**30
HEAD = {"num_cpus": 2, "memory": 1 * GiB}
NODE_A = {"num_cpus": 1, "memory": 4 * GiB, "resources": {"learner_node": 1}}
NODE_B = {"num_cpus": 2, "memory": 2 * GiB, "resources": {"env_node": 2}}
CPUS = HEAD["num_cpus"] + NODE_A["num_cpus"] + NODE_B["num_cpus"]
OFFER = {"2 CPU", "1 CPU, 1 learner_node", "2 CPU, 2 env_node"}
"""What the error messages say each node offers: CPUs and custom resources (Ray's bookkeeping hidden)."""


@pytest.fixture(scope="module")
def ray_cluster():
    ray.shutdown()  # an earlier test may have started a local Ray
    with loopback_only():  # the simulated nodes talk over 127.0.0.1, not the machine's network address
        sim = Cluster(initialize_head=True, head_node_args={**HEAD, "include_dashboard": False})
        try:
            node_a = sim.add_node(**NODE_A)
            node_b = sim.add_node(**NODE_B)
            sim.wait_for_nodes()
            ray.init(address=sim.address)
            yield {"head": sim.head_node.node_id, "A": node_a.node_id, "B": node_b.node_id}
        finally:
            ray.shutdown()
            sim.shutdown()


def policy(learner: dict, rollout: dict | None = None, placement: str = "PACK") -> dict:
    """``single_learner_coarse`` written out as a custom policy."""
    return {
        "name": "labelled",
        "placement": placement,
        "fragments": [
            {
                "name": "rollout",
                "components": ["env", "actor", "buffer"],
                "replicas": 2,
                "executor": "cpu",
                "resources": rollout or {"CPU": 1, "env_node": 1},
            },
            {"name": "learner", "components": ["learner"], "replicas": 1, "executor": "cpu", "resources": learner},
        ],
    }


def live_groups() -> list[str]:
    return [pg_id for pg_id, info in placement_group_table().items() if info["state"] != "REMOVED"]


def offered_nodes(message: str) -> set[str]:
    """The nodes of ``cluster offers 3 node(s): A; B; C``, in any order (Ray lists nodes in no fixed one)."""
    found = re.search(r"cluster offers 3 node\(s\): ([^;]+); ([^;]+); ([^;]+)$", message)
    assert found, message
    return set(found.groups())


def fails_fast(spec: dict) -> str:
    wait_until_idle(CPUS)
    run_plan = plan(small_config(spec))
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        make_runtime(run_plan).close()
    assert time.monotonic() - started < 10.0
    assert live_groups() == []
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.slow  # about 13 s: the suite's 6-minute budget; the fast custom-resource refusals stay
def test_labelled_fragments_run_on_their_nodes(ray_cluster):
    wait_until_idle(CPUS)
    # PACK alone would put two of the three 1-CPU bundles on the head; the labels decide instead.
    run_plan = plan(small_config(policy({"CPU": 1, "learner_node": 1, "memory": 2 * GiB})))
    runtime = make_runtime(run_plan)
    try:
        placement = runtime.placement()
        assert placement == {"rollout": [ray_cluster["B"]] * 2, "learner": [ray_cluster["A"]]}

        report = runtime.placement_report()
        short_a, short_b = ray_cluster["A"][:8], ray_cluster["B"][:8]
        assert report == [
            f"fragment rollout[0] on node 127.0.0.1 ({short_b}) with 1 CPU, 1 env_node",
            f"fragment rollout[1] on node 127.0.0.1 ({short_b}) with 1 CPU, 1 env_node",
            f"fragment learner[0] on node 127.0.0.1 ({short_a}) with 1 CPU, 2 GiB memory, 1 learner_node",
        ]

        # Each actor holds what its bundle reserved: the label and the memory, not only the CPU.
        (learner,) = runtime.workers["learner"]
        assert ray.get(learner.assigned_resources.remote()) == {"CPU": 1.0, "memory": 2.0 * GiB, "learner_node": 1.0}
        for rollout in runtime.workers["rollout"]:
            assert ray.get(rollout.assigned_resources.remote()) == {"CPU": 1.0, "env_node": 1.0}

        episodes = 0.0
        for _ in range(4):
            result = runtime.run_iteration(more=True)
            assert result.env_steps == NUM_ENVS * NUM_STEPS  # both rollout replicas on B stepped their half
            assert {"policy_loss", "value_loss"} <= set(result.output)  # the learner on A learned on the gathered batch
            assert all(map(math.isfinite, result.output.values()))
            episodes += result.component_metrics.get("episodes", 0.0)
        assert episodes > 0  # episodes finished on B and their returns reached the driver
    finally:
        runtime.close()
    assert live_groups() == []


@pytest.mark.parametrize(
    "learner, asked",
    [
        ({"CPU": 1, "gpu_node": 1}, "policy 'labelled' asks for 1 gpu_node in all but the cluster has 0"),
        ({"CPU": 1, "learner_node": 2}, "policy 'labelled' asks for 2 learner_node in all but the cluster has 1"),
        # Each resource exists, but no node has both.
        (
            {"CPU": 2, "learner_node": 1},
            "fragment 'learner' asks for 2 CPU, 1 learner_node per replica but no node has that much",
        ),
    ],
    ids=["unknown-label", "too-much-of-a-label", "label-and-cpus-on-no-one-node"],
)
def test_a_custom_resource_the_cluster_lacks_fails_fast(ray_cluster, learner, asked):
    message = fails_fast(policy(learner))
    assert asked in message
    assert offered_nodes(message) == OFFER


def test_memory_is_checked_per_node(ray_cluster):
    # 5 GiB fits the cluster's 7 GiB in all, but no node has that much.
    message = fails_fast(policy({"CPU": 1, "memory": 5 * GiB}))
    assert "fragment 'learner' asks for 1 CPU, 5 GiB memory per replica but no node has that much" in message
    # The offer shows each node's memory, since the policy asks for memory.
    assert offered_nodes(message) == {
        "2 CPU, 1 GiB memory",
        "1 CPU, 4 GiB memory, 1 learner_node",
        "2 CPU, 2 GiB memory, 2 env_node",
    }
    message = fails_fast(policy({"CPU": 1}, rollout={"CPU": 1, "memory": 4 * GiB}))
    assert re.search(r"asks for 8 GiB memory in all but the cluster has 7 GiB; cluster offers", message), message


# about 30 s, under -m slow: STRICT_PACK and STRICT_SPREAD placement stay in the default suite
@pytest.mark.slow
def test_compare_places_pack_and_spread_differently(ray_cluster, tmp_path: Path) -> None:
    """``msrl compare --placements PACK,SPREAD`` on the joined cluster: SPREAD puts the three replicas
    of single_learner_coarse on the three nodes, PACK on fewer; each row says how many it used."""
    import io

    from msrl.app import compare

    raw = yaml.safe_load(CONFIG.read_text())
    raw["algo"] = {**raw["algo"], "num_envs": NUM_ENVS, "num_steps": NUM_STEPS}
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(raw))
    wait_until_idle(CPUS)
    result = compare(
        tmp_path / "small.yaml",
        ["single_learner_coarse"],
        placements=["PACK", "SPREAD"],
        overrides=[f"runs_dir={tmp_path}", "eval_episodes=0", "checkpoint_every=0"],
        budget=4 * NUM_ENVS * NUM_STEPS,
        stream=io.StringIO(),
        table_stream=io.StringIO(),
    )
    nodes = {row["combination"]: row["nodes"] for row in result.table}
    assert nodes["single_learner_coarse SPREAD"] == 3 and nodes["single_learner_coarse PACK"] < 3, nodes
    for row in result.rows:
        placement = (Path(result.out_dir) / row["run_dir"] / "placement.txt").read_text().splitlines()
        assert len(placement) == 3 and all(line.startswith("fragment ") for line in placement)
