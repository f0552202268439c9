"""Distribution policies: presets, custom YAML policies and their validation,
and partitioning the traced PPO graph under a hand-written 2-fragment policy."""

from __future__ import annotations

import pytest
import yaml

import fragments
import msrl
from algorithms.ppo import PPO, PPOConfig
from fragments import PER_ITERATION, LoopBlock, build_program
from fragments.executors import EXECUTORS
from msrl import ConfigError
from msrl.app import load_config, plan
from msrl.core import ValueKind
from policies import PLACEMENTS, DistributionPolicy, FragmentSpec, load_policy, preset_names

RANGE = "replicas must be a positive integer or a range LO..HI with 1 <= LO <= HI (e.g. 2..8)"

PPO_ROLES = {"env": "env", "actor": "actor", "buffer": "buffer", "learner": "learner"}

TWO_FRAGMENTS = """
name: rollout-learn
placement: SPREAD
fragments:
  - name: rollout
    components: [env, actor, buffer]
    replicas: 2
  - name: learn
    components: [learner]
    replicas: 1
    resources: {CPU: 2}
"""


@pytest.fixture(scope="module")
def graph():
    algo = PPO(PPOConfig(num_envs=4, num_steps=8), msrl.RunInfo(seed=0, total_env_steps=1000))
    return msrl.trace(algo)


def custom(fragment_list, **top) -> DistributionPolicy:
    return load_policy({"fragments": fragment_list, **top})


# -- presets --------------------------------------------------------------------------------------
def test_local_preset():
    policy = load_policy("local")
    assert policy.name == "local" and policy.in_process
    assert preset_names() == [
        "async_single_learner",
        "gpu_only",
        "local",
        "multi_learner",
        "single_learner_coarse",
        "single_learner_fine",
    ]
    (fragment,) = policy.fragments
    assert (fragment.name, fragment.components, fragment.replicas, fragment.executor) == ("local", ["*"], 1, "cpu")
    assert fragment.resources == {"CPU": 1.0}
    assert policy.assign(PPO_ROLES) == {name: "local" for name in PPO_ROLES}
    # The same preset as a mapping with parameters.
    tuned = load_policy({"preset": "local", "cpus": 2, "executor": "cpu"})
    assert tuned.fragments[0].resources == {"CPU": 2.0} and tuned.fragments[0].cpus == 2


def test_unknown_preset_names_valid_choices():
    with pytest.raises(
        ConfigError, match=r"unknown policy 'ring'; valid choices: async_single_learner, gpu_only, local, multi_learner"
    ):
        load_policy("ring")
    with pytest.raises(
        ConfigError, match=r"unknown policy 'ring'; valid choices: async_single_learner, gpu_only, local, multi_learner"
    ):
        load_policy({"preset": "ring"})


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"preset": "local", "replicas": 2}, ["unknown parameter 'replicas'", "executor, cpus, device"]),
        ({"preset": "local", "cpus": "four"}, ["policy.cpus must be int", "'four'"]),
        ({"preset": "local", "cpus": 2.5}, ["policy.cpus must be int"]),
        ({"nothing": 1}, ["needs 'preset' or 'fragments'", "local"]),
        (42, ["preset name or a mapping", "42"]),
    ],
)
def test_bad_preset_specs(spec, words):
    with pytest.raises(ConfigError) as info:
        load_policy(spec)
    for word in words:
        assert word in str(info.value)


# -- custom policies from YAML ---------------------------------------------------------------------
def test_custom_policy_from_yaml():
    policy = load_policy(yaml.safe_load(TWO_FRAGMENTS))
    assert policy.name == "rollout-learn" and policy.placement == "SPREAD" and policy.mode == "sync"
    assert not policy.in_process
    rollout, learn = policy.fragments
    assert (rollout.name, rollout.components, rollout.replicas) == ("rollout", ["env", "actor", "buffer"], 2)
    assert (learn.name, learn.components, learn.replicas, learn.resources) == ("learn", ["learner"], 1, {"CPU": 2.0})
    assert policy.fragment("learn") is learn
    assert policy.assign(PPO_ROLES) == {"env": "rollout", "actor": "rollout", "buffer": "rollout", "learner": "learn"}
    with pytest.raises(ConfigError, match="no fragment 'nope'; fragments: rollout, learn"):
        policy.fragment("nope")
    # to_dict round-trips through load_policy.
    again = load_policy({"name": policy.name, **policy.to_dict()})
    assert again == policy


def test_custom_resources_and_memory_from_yaml():
    policy = load_policy(
        yaml.safe_load("""
fragments:
  - {name: rollout, components: [env, actor, buffer], replicas: 2, resources: {CPU: 1, env_node: 1}}
  - name: learn
    components: [learner]
    resources: {CPU: 1, GPU: 1, learner_node: 1, accelerator_type:H100: 0.001, memory: 8589934592}
""")
    )
    rollout, learn = policy.fragments
    assert rollout.resources == {"CPU": 1.0, "env_node": 1.0}
    assert learn.resources == {
        "CPU": 1.0,
        "GPU": 1.0,
        "learner_node": 1.0,
        "accelerator_type:H100": 0.001,
        "memory": 8 * 2.0**30,
    }
    # A float with no fractional part is a whole number of bytes too (a YAML 8.0e9, say).
    assert (
        custom([{"name": "a", "components": ["*"], "resources": {"memory": 8.0e9}}]).fragments[0].resources["memory"]
        == 8e9
    )


def test_roles_and_wildcard_place_the_rest():
    policy = custom([{"name": "learn", "components": ["learner"]}, {"name": "rest", "components": ["*"]}])
    assert policy.assign(PPO_ROLES) == {"env": "rest", "actor": "rest", "buffer": "rest", "learner": "learn"}
    # Exact names win over roles; roles take what is left.
    roles = {"cart": "env", "pi": "actor", "pi_old": "actor", "buf": "buffer", "opt": "learner"}
    policy = custom(
        [{"name": "a", "components": ["pi_old", "opt"]}, {"name": "b", "components": ["actor", "env", "buffer"]}]
    )
    assert policy.assign(roles) == {"pi_old": "a", "opt": "a", "pi": "b", "cart": "b", "buf": "b"}


def test_a_name_that_is_also_a_role_takes_the_rest_of_that_role():
    """GAIL's components beside PPO's: its discriminator (a learner) goes where ``learner`` is
    listed, its demonstrations (a buffer) where ``buffer`` is, under the presets' own lists."""
    roles = {**PPO_ROLES, "demos": "buffer", "discriminator": "learner"}
    policy = custom(
        [{"name": "rollout", "components": ["env", "actor", "buffer"]}, {"name": "learn", "components": ["learner"]}]
    )
    assert policy.assign(roles) == {
        "env": "rollout",
        "actor": "rollout",
        "buffer": "rollout",
        "demos": "rollout",
        "learner": "learn",
        "discriminator": "learn",
    }
    # a fragment that names the extra component itself still wins
    policy = custom(
        [
            {"name": "rollout", "components": ["env", "actor", "buffer"]},
            {"name": "learn", "components": ["learner", "demos"]},
        ]
    )
    assert policy.assign(roles)["demos"] == "learn"


def test_component_placed_twice_is_an_error():
    policy = custom(
        [{"name": "a", "components": ["env", "actor", "buffer", "learner"]}, {"name": "b", "components": ["learner"]}]
    )
    with pytest.raises(ConfigError, match="component 'learner' is placed in both 'a' and 'b'"):
        policy.assign(PPO_ROLES)


def test_role_placed_twice_is_an_error():
    # Component names differ from roles here, so 'learner' is a role: listing it
    # in two fragments places the learner "twice" and the second entry matches
    # nothing; that must be rejected like a duplicate name, not silently ignored.
    roles = {"cart": "env", "pi": "actor", "buf": "buffer", "opt": "learner"}
    policy = custom(
        [{"name": "a", "components": ["learner"]}, {"name": "b", "components": ["env", "actor", "buffer", "learner"]}]
    )
    with pytest.raises(ConfigError, match="learner"):
        policy.assign(roles)


def test_unplaced_component_is_an_error(graph):
    policy = custom([{"name": "a", "components": ["env", "actor"]}, {"name": "b", "components": ["learner"]}])
    with pytest.raises(ConfigError, match=r"components \['buffer'\] are not placed in any fragment of policy 'custom'"):
        policy.assign(PPO_ROLES)
    with pytest.raises(ConfigError, match="not placed"):
        fragments.partition(graph, policy)


def test_unknown_component_names_valid_choices(graph):
    policy = custom(
        [{"name": "a", "components": ["env", "actor", "buffer", "critic"]}, {"name": "b", "components": ["learner"]}]
    )
    with pytest.raises(
        ConfigError,
        match=r"fragment 'a' names unknown component 'critic'; "
        r"valid choices: actor, buffer, component, env, learner, \*",
    ):
        fragments.partition(graph, policy)


def test_fragment_left_empty_is_an_error(graph):
    policy = custom([{"name": "a", "components": ["*"]}, {"name": "b", "components": ["*"]}])
    with pytest.raises(ConfigError, match="fragment 'b' of policy 'custom' holds no component"):
        fragments.partition(graph, policy)


def test_unknown_executor_is_refused_when_the_graph_is_cut(graph):
    policy = custom([{"name": "a", "components": ["*"], "executor": "gpu"}])
    with pytest.raises(
        ConfigError, match=f"fragment 'a': unknown executor 'gpu'; valid choices: {', '.join(sorted(EXECUTORS))}"
    ):
        fragments.partition(graph, policy)


@pytest.mark.parametrize(
    "fragment, top, words",
    [
        ({}, {"placement": "ANYWHERE"}, ["unknown placement strategy 'ANYWHERE'", ", ".join(PLACEMENTS)]),
        ({}, {"mode": "lockstep"}, ["unknown mode 'lockstep'", "sync, async"]),
        ({"replicas": 0}, {}, [RANGE, "got 0"]),
        ({"replicas": -2}, {}, [RANGE, "got -2"]),
        ({"replicas": "2"}, {}, [RANGE, "got '2'"]),
        ({"replicas": True}, {}, [RANGE, "got True"]),
        ({"resources": {"CPU": -1}}, {}, ["resources must map names to non-negative numbers"]),
        (
            {"resources": {"CPU": float("inf")}},
            {},
            ["resources must map names to non-negative numbers", "got CPU: inf"],
        ),
        (
            {"resources": {"": 1}},
            {},
            ["resource names must be non-empty strings", "e.g. {CPU: 1, learner_node: 1}; got ''"],
        ),
        ({"resources": {1: 1}}, {}, ["resource names must be non-empty strings", "got 1"]),
        (
            {"resources": {"memory": 1.5e9 + 0.5}},
            {},
            ["resources.memory must be a whole number of bytes", "got 1500000000.5"],
        ),
        ({"resources": {"object_store_memory": 1e9}}, {}, ["cannot reserve object_store_memory", "use memory: BYTES"]),
        (
            {"gpus": 1},
            {},
            ["unknown key 'gpus' in policy.fragments[0]", "components, device, executor, name, replicas, resources"],
        ),
        ({"components": []}, {}, ["components must be a non-empty list"]),
        ({}, {"extra": 1}, ["unknown policy key 'extra'", "fragments, mode, name, placement"]),
    ],
)
def test_bad_custom_policy(fragment, top, words):
    with pytest.raises(ConfigError) as info:
        custom([{"name": "a", "components": ["*"], **fragment}], **top)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"fragments": []}, ["at least one fragment"]),
        ({"fragments": "rollout"}, ["must be a list"]),
        ({"fragments": [{"name": "a"}]}, ["needs 'name' and 'components'"]),
        (
            {"fragments": [{"name": "a", "components": ["*"]}, {"name": "a", "components": ["learner"]}]},
            ["fragment names must be unique"],
        ),
    ],
)
def test_bad_fragment_lists(spec, words):
    with pytest.raises(ConfigError) as info:
        load_policy(spec)
    for word in words:
        assert word in str(info.value)


def test_in_process_policy_has_one_single_replica_fragment():
    with pytest.raises(ConfigError, match="in-process"):
        DistributionPolicy("x", [FragmentSpec("a", ["*"], replicas=2)], in_process=True)


def test_custom_policy_is_checked_before_any_run_starts():
    bad = yaml.safe_load(TWO_FRAGMENTS)
    bad["fragments"][0]["replicas"] = 0
    with pytest.raises(ConfigError, match="replicas must be a positive integer"):
        load_config(None, base={"algorithm": "ppo", "policy": bad})
    # Names that only fragments (executors) or the traced graph (components) can check fail in plan().
    bad["fragments"][0].update(replicas=1, executor="quantum")
    with pytest.raises(ConfigError, match="unknown executor 'quantum'"):
        plan(load_config(None, ["algo.num_envs=2", "algo.num_steps=4"], base={"algorithm": "ppo", "policy": bad}))
    unknown = yaml.safe_load(TWO_FRAGMENTS)
    unknown["fragments"][1]["components"] = ["critic"]
    config = load_config(None, ["algo.num_envs=2", "algo.num_steps=4"], base={"algorithm": "ppo", "policy": unknown})
    with pytest.raises(ConfigError, match="unknown component 'critic'"):
        plan(config)


def test_the_plan_runs_under_the_policy_the_config_parsed():
    config = load_config(
        None,
        ["algo.num_envs=2", "algo.num_steps=4"],
        base={"algorithm": "ppo", "policy": yaml.safe_load(TWO_FRAGMENTS)},
    )
    assert isinstance(config.policy, DistributionPolicy)
    assert [f.name for f in config.policy.fragments] == ["rollout", "learn"]
    assert plan(config).fdg.policy is config.policy  # parsed once, by the config


# -- partitioning PPO ------------------------------------------------------------------------------
def test_partition_ppo_rollout_learn(graph):
    policy = load_policy(yaml.safe_load(TWO_FRAGMENTS))
    fdg = fragments.partition(graph, policy)
    assert fdg.lint() is None
    assert list(fdg.fragments) == ["rollout", "learn"]
    assert fdg.fragments["rollout"].components == ["env", "actor", "buffer"]
    assert fdg.fragments["learn"].components == ["learner"]
    assert fdg.fragments["rollout"].nodes == [
        "env.observe",
        "actor.act",
        "env.step",
        "buffer.insert",
        "actor.value",
        "buffer.drain",
        "actor.set_weights",
    ]
    assert fdg.fragments["learn"].nodes == ["learner.learn", "learner.get_weights", "output"]

    interfaces = {(str(i.value), i.src, i.dst): (i.op, i.kind, i.frequency) for i in fdg.interfaces}
    assert interfaces == {
        ("%buffer.drain", "rollout", "learn"): ("gather", ValueKind.BATCHED, PER_ITERATION),
        ("%learner.get_weights", "learn", "rollout"): ("broadcast", ValueKind.GLOBAL, PER_ITERATION),
    }

    text = str(fdg)
    assert "FDG for policy 'rollout-learn' (placement SPREAD, sync)" in text
    assert "fragment rollout: 2 x [env, actor, buffer]" in text
    assert "fragment learn: 1 x [learner]" in text and "resources(CPU=2)" in text
    assert "rollout -> learn: %buffer.drain [gather, batched, per_iteration]" in text
    assert "learn -> rollout: %learner.get_weights [broadcast, global, per_iteration]" in text

    # The rollout fragment keeps its loop as a block, carrying env.step's obs.
    program = build_program(fdg, "rollout")
    blocks = [s for s in program.steps if isinstance(s, LoopBlock)]
    assert len(blocks) == 1
    assert [n.name for n in blocks[0].body] == ["actor.act", "env.step", "buffer.insert"]
    assert blocks[0].carried == {"env.step"}
    assert [n.name for n in build_program(fdg, "learn").nodes()] == ["learner.learn", "learner.get_weights", "output"]


def test_partition_is_pure_and_repeatable(graph):
    policy = load_policy(yaml.safe_load(TWO_FRAGMENTS))
    first, second = fragments.partition(graph, policy), fragments.partition(graph, policy)
    assert str(first) == str(second)
    assert first.interfaces == second.interfaces and first.assignment == second.assignment
    graph.lint()  # the traced graph is untouched


def test_partition_interface_ops_follow_replica_counts(graph):
    def ops(rollout_replicas, learn_replicas):
        policy = custom(
            [
                {"name": "r", "components": ["env", "actor", "buffer"], "replicas": rollout_replicas},
                {"name": "l", "components": ["learner"], "replicas": learn_replicas},
            ]
        )
        fdg = fragments.partition(graph, policy)
        return {(str(i.value), i.op) for i in fdg.interfaces}

    assert ops(1, 1) == {("%buffer.drain", "p2p"), ("%learner.get_weights", "p2p")}
    assert ops(1, 2) == {("%buffer.drain", "scatter"), ("%learner.get_weights", "gather"), ("None", "allreduce")}
    assert ops(2, 2) == {("%buffer.drain", "p2p"), ("%learner.get_weights", "p2p"), ("None", "allreduce")}
    with pytest.raises(ConfigError, match="cannot connect 2 replicas to 3"):
        ops(2, 3)


def test_partition_under_local_is_one_fragment_without_interfaces(graph):
    fdg = fragments.partition(graph, load_policy("local"))
    assert list(fdg.fragments) == ["local"]
    assert fdg.fragments["local"].nodes == [n.name for n in graph.nodes]
    assert fdg.interfaces == []
    assert "fragment local: 1 x [env, actor, buffer, learner]" in str(fdg)
