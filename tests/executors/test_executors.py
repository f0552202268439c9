"""Executors switched by config run the same algorithm, with environments built
the way each executor prefers (never swapped in afterwards); a sharded
environment is the concatenation of its shards; unavailable executors fail
with one line before anything is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import msrl
import msrl.envs
from fragments.executors import get_executor
from msrl.app import load_config, make_runtime, plan
from msrl.envs import ShardedEnv

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


def test_torch_executor_builds_env_on_torch_backend(tmp_path: Path) -> None:
    config = load_config(CONFIG, [f"runs_dir={tmp_path}", "policy.executor=torch", "algo.num_steps=4"])
    runtime = make_runtime(plan(config))
    try:
        env = runtime.components["env"]
        assert env.spec.backend == "torch" and runtime.algorithm.env is env
        assert isinstance(env.observe(), torch.Tensor)
        result = runtime.run_iteration()
        assert result.env_steps == 64 * 4
        assert set(result.output) >= {"policy_loss", "value_loss", "entropy"}
    finally:
        runtime.close()


def test_unknown_executor_names_valid_choices() -> None:
    with pytest.raises(msrl.ConfigError, match="valid choices: cpu, cuda, torch"):
        get_executor("tpu")


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


def test_deferred_diagnostics_run_after_the_weights_are_handed_on(tmp_path: Path, monkeypatch) -> None:
    """PPO's learner defers its diagnostics: the executor computes them at the end of
    the iteration, after the actor took the new weights, and returns them resolved."""
    from algorithms.ppo import PPOLearner
    from msrl.rl import ActorCriticActor

    events: list[str] = []
    diagnostics, set_weights = PPOLearner.diagnostics, ActorCriticActor.set_weights
    monkeypatch.setattr(
        PPOLearner, "diagnostics", lambda self, *a: events.append("diagnostics") or diagnostics(self, *a)
    )
    monkeypatch.setattr(
        ActorCriticActor, "set_weights", lambda self, w: events.append("set_weights") or set_weights(self, w)
    )
    config = load_config(CONFIG, [f"runs_dir={tmp_path}", "algo.num_envs=4", "algo.num_steps=8"])
    runtime = make_runtime(plan(config))
    try:
        for _ in range(2):
            result = runtime.run_iteration()
            assert isinstance(result.output, dict) and np.isfinite(result.output["approx_kl"])
    finally:
        runtime.close()
    assert events == ["set_weights", "diagnostics"] * 2
