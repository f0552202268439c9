"""The fragment programs built for the distributed presets on the PPO graph, and the presets
themselves (parameters, errors, and the interfaces they cut the PPO graph into, as DESIGN.md's
table says).  What crosses each interface is in test_interfaces.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fragments import (
    PER_ITERATION,
    PER_STEP,
    LoopBlock,
    Recv,
    build_program,
)
from msrl import ConfigError
from msrl.app import load_config, plan
from msrl.core import ValueKind
from policies import load_policy

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml"


# -- fragment programs on the PPO graph -------------------------------------------------------------
def ppo_config(*overrides: str):
    base = yaml.safe_load(CONFIG.read_text())
    return load_config(None, ["algo.num_envs=8", "algo.num_steps=4", *overrides], base=base)


def fdg_for(policy: str, *overrides: str):
    fdg = plan(ppo_config(f"policy={policy}", *overrides)).fdg
    return fdg


def describe(steps) -> list:
    """A program's steps as names, loops as nested lists, receives marked ``recv:``."""
    out = []
    for step in steps:
        if isinstance(step, LoopBlock):
            out.append(describe(step.body))
        else:
            out.append(("recv:" if isinstance(step, Recv) else "") + step.name)
    return out


@pytest.fixture(scope="module")
def fine():
    return fdg_for("single_learner_fine")


def test_fine_learner_program_receives_observations_and_sends_actions(fine):
    program = build_program(fine, "learner")
    steps = describe(program.steps)
    # env.observe arrives once, before the loop; env.step every step, between acting and inserting.
    assert steps[0] == "recv:env.observe"
    loops = [s for s in program.steps if isinstance(s, LoopBlock)]
    assert len(loops) == 1
    assert describe(loops[0].body) == ["actor.act", "recv:env.step", "buffer.insert"]
    assert steps.index("recv:env.observe") < steps.index(describe(loops[0].body))
    assert "actor.act" in program.sends
    assert {(i.op, i.dst) for i in program.sends["actor.act"]} == {("scatter", "env")}
    # The loop's carried obs comes from a received node, which the program must snapshot too.
    assert loops[0].carried == {"env.step"}
    # Only the nodes the learner fragment runs are Nodes; the received ones are not run here.
    assert [n.name for n in program.nodes()] == fine.fragments["learner"].nodes
    received = {r.name: {i.value.index for i in r.interfaces} for r in program.recvs()}
    assert received == {"env.observe": {0}, "env.step": {0, 1, 2, 3}}


def test_fine_env_program_receives_actions_inside_its_loop(fine):
    program = build_program(fine, "env")
    assert describe(program.steps) == ["env.observe", ["recv:actor.act", "env.step"]]
    assert set(program.sends) == {"env.observe", "env.step"}
    assert all(i.op == "gather" and i.dst == "learner" for i in program.sends["env.step"])
    (recv,) = program.recvs()
    assert [(i.op, i.src) for i in recv.interfaces] == [("scatter", "learner")]


def test_coarse_programs_exchange_trajectories_and_weights():
    fdg = fdg_for("single_learner_coarse")
    rollout, learner = build_program(fdg, "rollout"), build_program(fdg, "learner")
    assert describe(rollout.steps) == [
        "env.observe",
        ["actor.act", "env.step", "buffer.insert"],
        "actor.value",
        "buffer.drain",
        "recv:learner.get_weights",
        "actor.set_weights",
    ]
    assert list(rollout.sends) == ["buffer.drain"]
    assert describe(learner.steps) == ["recv:buffer.drain", "learner.learn", "learner.get_weights", "output"]
    assert list(learner.sends) == ["learner.get_weights"]


# -- presets ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec, fragments, placement, mode",
    [
        (
            {"preset": "single_learner_coarse", "actors": 4, "placement": "SPREAD"},
            {"rollout": (4, "cpu", {"CPU": 1.0}), "learner": (1, "cpu", {"CPU": 1.0})},
            "SPREAD",
            "sync",
        ),
        (
            {"preset": "single_learner_fine", "envs": 3, "env_cpus": 2, "learner_gpus": 1},
            {"env": (3, "cpu", {"CPU": 2.0}), "learner": (1, "torch", {"CPU": 1.0, "GPU": 1.0})},
            "PACK",
            "sync",
        ),
        (
            {"preset": "multi_learner", "learners": 4, "cpus": 2, "placement": "STRICT_SPREAD"},
            {"worker": (4, "cpu", {"CPU": 2.0})},
            "STRICT_SPREAD",
            "sync",
        ),
        ({"preset": "gpu_only", "cpus": 2}, {"device": (1, "torch", {"CPU": 2.0, "GPU": 1.0})}, "PACK", "sync"),
        ({"preset": "gpu_only", "device": "cpu"}, {"device": (1, "torch", {"CPU": 1.0})}, "PACK", "sync"),
        (
            {"preset": "async_single_learner", "actors": 3, "placement": "STRICT_PACK"},
            {"rollout": (3, "cpu", {"CPU": 1.0}), "learner": (1, "cpu", {"CPU": 1.0})},
            "STRICT_PACK",
            "async",
        ),
    ],
)
def test_presets_take_parameters(spec, fragments, placement, mode):
    policy = load_policy(spec)
    assert policy.name == spec["preset"] and not policy.in_process
    assert (policy.placement, policy.mode) == (placement, mode)
    assert {f.name: (f.replicas, f.executor, f.resources) for f in policy.fragments} == fragments


def test_preset_devices_follow_gpus():
    assert load_policy({"preset": "single_learner_fine", "learner_gpus": 1}).fragment("learner").device == "cuda"
    assert load_policy("single_learner_fine").fragment("learner").device == "cpu"
    assert load_policy({"preset": "gpu_only", "device": "cpu"}).fragment("device").device == "cpu"
    assert load_policy("gpu_only").fragment("device").device == "cuda"


@pytest.mark.parametrize(
    "preset, valid",
    [
        ("single_learner_coarse", ["actors", "actor_executor", "learner_gpus", "placement"]),
        ("single_learner_fine", ["envs", "env_executor", "learner_gpus", "placement"]),
        ("multi_learner", ["learners", "executor", "cpus", "gpus", "placement"]),
        ("gpu_only", ["executor", "device", "cpus"]),
        ("async_single_learner", ["actors", "learner_cpus", "placement"]),
    ],
)
def test_presets_reject_unknown_parameters(preset, valid):
    with pytest.raises(ConfigError) as info:
        load_policy({"preset": preset, "replicas": 2})
    message = str(info.value)
    assert f"unknown parameter 'replicas' for policy {preset!r}; valid choices:" in message
    for name in valid:
        assert name in message


def test_presets_reject_wrongly_typed_parameters():
    with pytest.raises(ConfigError, match=r"policy.actors must be a positive integer or a range LO..HI .* got 'four'"):
        load_policy({"preset": "single_learner_coarse", "actors": "four"})
    with pytest.raises(ConfigError, match=r"unknown placement strategy 'EVERYWHERE'"):
        load_policy({"preset": "multi_learner", "placement": "EVERYWHERE"})


def test_coarse_partition_gathers_trajectories_and_broadcasts_weights():
    for preset in ("single_learner_coarse", "async_single_learner"):
        fdg = fdg_for(preset)
        assert {(str(i.value), i.src, i.dst): (i.op, i.kind, i.frequency) for i in fdg.interfaces} == {
            ("%buffer.drain", "rollout", "learner"): ("gather", ValueKind.BATCHED, PER_ITERATION),
            ("%learner.get_weights", "learner", "rollout"): ("broadcast", ValueKind.GLOBAL, PER_ITERATION),
        }


def test_fine_partition_gathers_steps_and_scatters_actions(fine):
    interfaces = {(str(i.value), i.src, i.dst): (i.op, i.kind, i.frequency) for i in fine.interfaces}
    for index in range(4):
        ref = "%env.step" if index == 0 else f"%env.step[{index}]"
        assert interfaces[(ref, "env", "learner")] == ("gather", ValueKind.BATCHED, PER_STEP)
    assert interfaces[("%actor.act", "learner", "env")] == ("scatter", ValueKind.BATCHED, PER_STEP)
    assert interfaces[("%env.observe", "env", "learner")] == (
        "gather",
        ValueKind.BATCHED,
        PER_ITERATION,
    )  # made before the loop
    assert len(interfaces) == 6
    assert not any(i.op in ("broadcast", "allreduce") for i in fine.interfaces)


def test_multi_learner_partition_all_reduces_gradients():
    fdg = fdg_for("multi_learner")
    assert list(fdg.fragments) == ["worker"]
    assert fdg.fragments["worker"].replicas == 2
    (allreduce,) = fdg.interfaces
    assert (allreduce.op, allreduce.src, allreduce.dst, allreduce.value) == ("allreduce", "worker", "worker", None)
    # The collective is inside the learner, not a dataflow edge: the program neither sends nor receives.
    program = build_program(fdg, "worker")
    assert program.sends == {} and program.recvs() == []


def test_gpu_only_partition_is_one_fragment_without_interfaces():
    fdg = fdg_for("gpu_only")
    assert list(fdg.fragments) == ["device"]
    assert fdg.fragments["device"].nodes == [node.name for node in fdg.graph.nodes]
    assert fdg.interfaces == []


@pytest.mark.parametrize(
    "policy",
    ["policy.preset=single_learner_coarse", "policy.preset=single_learner_fine", "policy.preset=multi_learner"],
)
def test_plan_rejects_num_envs_not_divisible_by_replicas(policy):
    replicas = {"single_learner_coarse": "actors", "single_learner_fine": "envs", "multi_learner": "learners"}
    preset = policy.split("=")[1]
    with pytest.raises(ConfigError) as info:
        plan(ppo_config(policy, f"policy.{replicas[preset]}=3"))
    assert "algo.num_envs (8)" in str(info.value) and "3 replicas of fragment" in str(info.value)
    # The same policy with a divisor of num_envs plans fine.
    fdg = plan(ppo_config(policy, f"policy.{replicas[preset]}=4")).fdg
    assert max(f.replicas for f in fdg.fragments.values()) == 4
