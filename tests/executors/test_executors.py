"""Executors switched by config run the same algorithm, with environments built
the way each executor prefers (never swapped in afterwards); a sharded
environment is the concatenation of its shards; unavailable executors fail
with one line before anything is built.

The cases at the end run on every executor through the ``executor`` fixture
(``conftest.py``), each checked against the plain in-process run with the same seeds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fragments
import msrl
import msrl.envs
from algorithms.dqn import DQN, DQNConfig
from algorithms.mappo import IPPO, IPPOConfig
from algorithms.ppo import PPO, PPOConfig, PPOLearner
from fragments.executors import EXECUTORS, check_executor, get_executor
from msrl.app import load_config, make_runtime, plan
from msrl.core import building
from msrl.envs import ShardedEnv
from policies import load_policy

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")


def test_sharded_env_equals_its_shards_concatenated() -> None:
    shard = lambda n, seed: msrl.envs.make("CartPole-v1", n, seed=seed)  # noqa: E731
    sharded = ShardedEnv(shard, 10, 5, 2)
    try:
        # The same shards built by hand: seeds follow the documented offsets.
        first = msrl.envs.make("CartPole-v1", 5, seed=5)
        second = msrl.envs.make("CartPole-v1", 5, seed=5 + 7919)
        np.testing.assert_array_equal(sharded.observe(), np.concatenate([first.observe(), second.observe()]))
        rng = np.random.default_rng(0)
        for _ in range(300):
            action = rng.integers(0, 2, size=10)
            got = sharded.step(action)
            want = [np.concatenate(parts) for parts in zip(first.step(action[:5]), second.step(action[5:]))]
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
        metrics = sharded.metrics()
        assert metrics["episodes"] > 0
        state = sharded.state_dict()
        after = sharded.step(np.ones(10, dtype=np.int64))
        sharded.load_state_dict(state)
        np.testing.assert_array_equal(sharded.step(np.ones(10, dtype=np.int64))[0], after[0])
    finally:
        sharded.close()


def test_a_sharded_env_without_active_keeps_every_agent_in() -> None:
    shard = lambda n, seed: msrl.envs.make("simple_spread_v3", n, seed=seed)  # noqa: E731
    sharded = ShardedEnv(shard, 5, 0, 2)
    try:
        assert {g: a.tolist() for g, a in sharded.active().items()} == {"agents": [[1.0] * 3] * 5}
    finally:
        sharded.close()


def test_a_sharded_multi_agent_env_equals_its_shards_concatenated() -> None:
    """Per-group dicts are split and joined group by group; per-group returns are weighted means."""
    kwargs = {"num_taggers": 2, "num_runners": 3, "world_size": 4.0, "max_episode_steps": 20}
    shard = lambda n, seed: msrl.envs.make("Tag-v0", n, seed=seed, **kwargs)  # noqa: E731
    sharded = ShardedEnv(shard, 6, 5, 2)
    try:
        assert sharded.groups is not None and sharded.num_agents == 5
        first, second = (msrl.envs.make("Tag-v0", 3, seed=seed, **kwargs) for seed in (5, 5 + 7919))
        rng = np.random.default_rng(0)
        n = first.groups["taggers"].action_space.n
        for _ in range(60):
            action = {"taggers": rng.integers(0, n, (6, 2)), "runners": rng.integers(0, n, (6, 3))}
            got = sharded.step(action)
            halves = [
                first.step({g: a[:3] for g, a in action.items()}),
                second.step({g: a[3:] for g, a in action.items()}),
            ]
            for index in range(4):
                want, value = [half[index] for half in halves], got[index]
                if isinstance(value, dict):
                    assert set(value) == {"taggers", "runners"}
                    for group in value:
                        np.testing.assert_array_equal(value[group], np.concatenate([w[group] for w in want]))
                else:
                    np.testing.assert_array_equal(value, np.concatenate(want))
            active, want_active = sharded.active(), [first.active(), second.active()]
            for group in ("taggers", "runners"):
                np.testing.assert_array_equal(active[group], np.concatenate([w[group] for w in want_active]))
        assert sharded.active()["runners"].min() == 0.0  # a runner was out after the last step
        metrics, parts = sharded.metrics(), [first.metrics(), second.metrics()]
        count = sum(p["episodes"] for p in parts)
        assert metrics["episodes"] == count > 0
        for key in ("episode_return", "episode_return/taggers", "episode_return/runners", "episode_length"):
            assert metrics[key] == pytest.approx(sum(p[key] * p["episodes"] for p in parts) / count)
    finally:
        sharded.close()


def test_cpu_executor_builds_sharded_envs_for_large_batches_only(tmp_path: Path) -> None:
    small = load_config(CONFIG, [f"runs_dir={tmp_path}", "policy.cpus=2"])
    runtime = make_runtime(plan(small))
    assert not isinstance(runtime.components["env"], ShardedEnv)
    runtime.close()
    large = load_config(
        CONFIG,
        [f"runs_dir={tmp_path}", "policy.cpus=2", "algo.num_envs=32768", "algo.num_steps=1", "algo.num_minibatches=4"],
    )
    runtime = make_runtime(plan(large))
    try:
        env = runtime.components["env"]
        assert isinstance(env, ShardedEnv) and [shard.num_envs for shard in env.shards] == [16384, 16384]
        assert runtime.algorithm.env is env  # built sharded, not swapped in after the algorithm was built
        result = runtime.run_iteration()
        assert result.env_steps == 32768
    finally:
        runtime.close()
    assert env.pool._shutdown  # the executor closed what the environment held


def test_unknown_executor_names_valid_choices() -> None:
    with pytest.raises(msrl.ConfigError, match="valid choices: cpu, cpu-kernel, cuda, torch"):
        get_executor("tpu")


def test_one_check_names_the_fragment_and_the_registry_choices() -> None:
    """``check_executor`` is the check the partitioner and the pre-flight call: one message."""
    check_executor("torch", "learner")  # a registered kind passes
    with pytest.raises(msrl.ConfigError) as info:
        check_executor("tpu", "learner")
    assert str(info.value) == "fragment 'learner': unknown executor 'tpu'; valid choices: cpu, cpu-kernel, cuda, torch"
    assert sorted(EXECUTORS) == ["cpu", "cpu-kernel", "cuda", "torch"]
    assert all(cls.kind == kind for kind, cls in EXECUTORS.items())
    with pytest.raises(TypeError):
        EXECUTORS["tpu"] = EXECUTORS["cpu"]  # type: ignore[index]  # read-only: the table is declared once
    policy = load_policy({"preset": "local", "executor": "tpu", "device": "cpu"})
    with pytest.raises(msrl.ConfigError, match=r"^fragment 'local': unknown executor 'tpu'; valid choices: cpu, "):
        fragments.partition(msrl.trace(fragments.declare(_local("cpu", "ppo")[0])), policy)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU, so the cuda executor may be available")
def test_cuda_executor_without_gpu_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "msrl",
            "train",
            CONFIG,
            "--set",
            f"runs_dir={tmp_path}",
            "--set",
            "policy.executor=cuda",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msrl: error: the cuda executor needs")
    assert list(tmp_path.iterdir()) == []


# -- the same cases on every executor (the ``executor`` fixture, tests/executors/conftest.py) -------------
def _small(algorithm: str) -> tuple[type[msrl.Algorithm], Any]:
    """A few-second run of each kind of algorithm: on-policy, off-policy with replay, multi-agent."""
    if algorithm == "ppo":
        return PPO, PPOConfig(num_envs=4, num_steps=16, update_epochs=2, num_minibatches=4)
    if algorithm == "dqn":
        config = DQNConfig(num_envs=4, train_frequency=8, gradient_steps=4, batch_size=16, buffer_size=256)
        config.learning_starts, config.target_update_interval, config.hidden_sizes = 32, 4, (32, 32)
        return DQN, config
    config = IPPOConfig(env_id="Tag-v0", num_envs=2, num_steps=8, update_epochs=2, num_minibatches=2, hidden_size=16)
    config.env_kwargs = {"num_taggers": 2, "num_runners": 3, "max_episode_steps": 20}
    config.policies = {"taggers": "tagger", "runners": "runner"}
    return IPPO, config


def _local(executor: str, algorithm: str, cpus: int = 1) -> tuple[fragments.BuildRecipe, fragments.FragmentedGraph]:
    """The algorithm's recipe and its graph cut by the ``local`` policy on ``executor``."""
    cls, config = _small(algorithm)
    recipe = fragments.BuildRecipe(cls, config, seed=7, total_env_steps=10_000)
    policy = load_policy({"preset": "local", "executor": executor, "cpus": cpus})
    return recipe, fragments.partition(msrl.trace(fragments.declare(recipe)), policy)


def _plain(recipe: fragments.BuildRecipe, fdg: fragments.FragmentedGraph) -> msrl.Algorithm:
    """The algorithm built as it is written, its environments built for the fragment's executor,
    with the run's seeds: ``train_step()`` called on it is the plain in-process run."""
    with building(only=None):
        return recipe.algorithm(recipe.config, fragments.run_info(recipe, fdg, "local"))


def _assert_identical(a: Any, b: Any, where: str) -> None:
    """Equal bit for bit, through nested dicts, sequences, tensors and arrays."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for key in a:
            _assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.device == b.device and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"  # NaN equals NaN here


@pytest.mark.parametrize("algorithm", ["ppo", "dqn", "ippo"])
def test_an_executor_computes_what_the_plain_in_process_run_does(executor: str, algorithm: str) -> None:
    """Three iterations of the traced program on the executor, and three ``train_step()`` calls
    on the same algorithm built with the same seeds, give the same outputs, metrics and state."""
    recipe, fdg = _local(executor, algorithm)
    plain = _plain(recipe, fdg)  # built before the executor sets torch's threads, as the runtime's is
    runtime = fragments.LocalRuntime(recipe, fdg)
    try:
        assert runtime.algorithm is not plain
        for name, component in plain.components().items():
            _assert_identical(runtime.components[name].state_dict(), component.state_dict(), f"start: {name}")
        traced = [runtime.run_iteration() for _ in range(3)]
    finally:
        runtime.close()
    for i, result in enumerate(traced):
        output = plain.train_step()
        polled = {k: v for c in plain.components().values() for k, v in c.metrics().items()}
        _assert_identical(result.output, output, f"iteration {i}: output")
        _assert_identical(result.component_metrics, polled, f"iteration {i}: metrics")
        assert result.env_steps > 0
    for name, component in plain.components().items():
        _assert_identical(runtime.components[name].state_dict(), component.state_dict(), f"end: {name}")


def test_an_executor_builds_environments_on_the_backend_it_prefers(executor: str) -> None:
    recipe, fdg = _local(executor, "ppo")
    runtime = fragments.LocalRuntime(recipe, fdg)
    try:
        env, spec = runtime.components["env"], fdg.fragments["local"].spec
        assert runtime.algorithm.env is env  # built that way, not swapped in after the algorithm was built
        preferred = get_executor(executor).env_backends
        assert env.spec.backend == (preferred[0] if preferred else "numpy")
        obs = env.observe()
        if env.spec.backend in ("torch", "cuda"):  # device memory; cpu-kernel's kernels step NumPy arrays
            assert isinstance(obs, torch.Tensor) and obs.device.type == torch.device(spec.device).type
        else:
            assert isinstance(obs, np.ndarray)
        assert runtime.run_iteration().env_steps == 4 * 16
    finally:
        runtime.close()


@pytest.mark.parametrize("cpus", [1, 1_000_000])
def test_setup_sizes_torch_threads_to_the_cpus_capped_at_the_cores(executor: str, cpus: int) -> None:
    """Every executor's setup: a million CPUs is the machine's cores (a million threads crash the process)."""
    recipe, fdg = _local(executor, "ppo", cpus=cpus)
    runtime = fragments.LocalRuntime(recipe, fdg)
    try:
        assert torch.get_num_threads() == min(cpus, os.cpu_count() or 1)
        assert runtime.run_iteration().env_steps == 4 * 16
    finally:
        runtime.close()


def test_deferred_diagnostics_run_after_the_weights_are_handed_on(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PPO's learner defers its diagnostics: the executor computes them at the end of
    the iteration, after the actor took the new weights, and returns them resolved."""
    from msrl.rl import ActorCriticActor

    events: list[str] = []
    diagnostics, set_weights = PPOLearner.diagnostics, ActorCriticActor.set_weights
    monkeypatch.setattr(
        PPOLearner, "diagnostics", lambda self, *a: events.append("diagnostics") or diagnostics(self, *a)
    )
    monkeypatch.setattr(
        ActorCriticActor, "set_weights", lambda self, w: events.append("set_weights") or set_weights(self, w)
    )
    recipe, fdg = _local(executor, "ppo")
    runtime = fragments.LocalRuntime(recipe, fdg)
    try:
        for _ in range(2):
            output = runtime.run_iteration().output
            assert isinstance(output, dict) and np.isfinite(output["approx_kl"])
    finally:
        runtime.close()
    assert events == ["set_weights", "diagnostics"] * 2
