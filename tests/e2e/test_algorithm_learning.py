"""Every built-in algorithm learns with its shipped config: fixed seed, greedy return threshold,
the config's own budget unless ``OVERRIDES`` gives a smaller one (the shipped file keeps the
reference's settings; a test's reduced budget is an override, never the file).  30-50 s each on
2 cores, so under ``-m slow`` (run ``pytest -m slow tests/e2e/test_algorithm_learning.py``): the
default suite keeps PPO CartPole (tests/e2e/test_learning.py) and MAPPO on simple_spread
(test_multi_agent.py) as its learning checks, and CI's landing tier runs the learning gate
(test_learning_gate.py: PPO, A2C and DQN on CartPole held to stored bands)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import msrl

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"

# config -> greedy-return threshold (CartPole >= 475, CartPole-v1's reward threshold in gymnasium; Pendulum >= -250)
LEARNING = {
    "a2c_cartpole": 475.0,
    "ppo_pendulum": -250.0,
    # under its default policy, async_single_learner.  Not 475: over seeds 0-19 at 200k steps, 14
    # end at 475 or more and none collapses to the return-9 policy the bar guards against, but the
    # config's seed 1 (230) is among the 6 that end below 475, at 139-464 (BENCHMARKS.md, "IMPALA
    # CartPole-v1")
    "impala_cartpole": 200.0,
    # under its default policy, async_single_learner, whose weights reach the actors when they are
    # ready, so runs of one seed differ by timing.  Not 475: over seeds 0-4 at this setting four end at
    # 500 and seed 1, the config's, at 231.8 after reaching 475 in training at 47k steps (BENCHMARKS.md,
    # "A3C beside A2C on CartPole-v1"); the bar guards against the collapse to a random policy's ~22
    "a3c_cartpole": 200.0,
    "pg_cartpole": 475.0,
    "ac_cartpole": 475.0,
}
"""The on-policy ones; the off-policy ones (DQN, SAC) are in test_off_policy_learning.py."""


OVERRIDES: dict[str, list[str]] = {
    # rl-zoo's 500k steps of RMSprop at 7e-4 take about 4 CPU minutes: 200k steps of 16 envs and Adam
    # at 1e-3 annealed (the setting of the learning gate's A2C row) take about 25 s
    "a2c_cartpole": [
        "total_env_steps=200000",
        "algo.num_envs=16",
        "algo.optimizer=adam",
        "algo.learning_rate=1.0e-3",
        "algo.anneal_lr=true",
        "algo.vf_coef=0.5",  # with Adam, as the gate's row; the file's 1.0 is SB3's scale at rl-zoo's settings
    ],
    # A2C's test setting, so the two compare step for step (BENCHMARKS.md, "A3C beside A2C")
    "a3c_cartpole": [
        "total_env_steps=200000",
        "algo.num_envs=16",
        "algo.optimizer=adam",
        "algo.learning_rate=1.0e-3",
        "algo.anneal_lr=true",
        "algo.vf_coef=0.5",
    ],
    "impala_cartpole": ["total_env_steps=100000"],  # of the shipped 200k (the step size anneals over it)
}
"""config -> the reduced budget its test runs (``--set`` overrides); absent: the shipped config as it is."""


@pytest.mark.parametrize("name", sorted(LEARNING))
def test_algorithm_learns_with_its_config(name: str, tmp_path: Path) -> None:
    learns_with_its_config(name, LEARNING[name], tmp_path, OVERRIDES.get(name, []))


def learns_with_its_config(name: str, threshold: float, tmp_path: Path, overrides: Sequence[str] = ()) -> None:
    common = [f"runs_dir={tmp_path}", "progress=false", "checkpoint_every=0"]
    run = msrl.train(str(CONFIGS / f"{name}.yaml"), [*common, *overrides])
    assert run.evaluation.episodes == 20
    assert run.evaluation.mean >= threshold, f"{name}: greedy return {run.evaluation.mean}"
