"""Every distribution preset on a real local Ray: the quick-start config runs
under each switched only by ``--set policy=<preset>`` and solves CartPole
(every preset under ``-m slow``; the default suite's learning threshold is
``local``'s, in test_learning.py).  That the transport is exact is in
test_preset_exactness.py (its own file, so the two test workers share them out)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import msrl

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")

PRESETS = {
    "single_learner_coarse": ["policy=single_learner_coarse"],
    "single_learner_fine": ["policy=single_learner_fine"],
    "multi_learner": ["policy=multi_learner"],
    "gpu_only": ["policy=gpu_only", "policy.device=cpu"],  # the same one-actor layout where no GPU is lent
    "async_single_learner": ["policy=async_single_learner"],
}


def _replicas(run: msrl.Run, fragment: str) -> list[dict]:
    """Every replica's saved component states (the checkpoint loads without pickled code)."""
    return torch.load(run.checkpoint, weights_only=True)["components"]["_replicas"][fragment]


def _check_records(preset: str, run: msrl.Run) -> None:
    records = run.metrics
    assert all(r["time_communication"] >= 0 for r in records)
    if preset != "gpu_only":  # values cross fragments: communication time is measured
        assert sum(r["time_communication"] for r in records) > 0
    if preset == "async_single_learner":  # actors run one update behind once the pipeline fills
        lags = [r["policy_lag"] for r in records]
        assert lags[0] == 0 and max(lags) == 1 and sum(lags) > len(lags) / 2
    if preset == "multi_learner":  # all-reduced gradients keep the learner replicas identical
        first, second = (replica["learner"]["net"] for replica in _replicas(run, "worker"))
        assert all(torch.equal(first[key], second[key]) for key in first)


# In the default suite only the asynchronous preset runs here end to end, the others under -m slow.
# What the default suite keeps of them: single_learner_coarse trains end to end with one actor, step
# for step as local, and resumes exactly (test_preset_exactness.py); every synchronous preset, coarse
# and multi_learner among them, builds its workers and runs an iteration (tests/cluster/test_shares.py).
# multi_learner end to end (here and in test_preset_exactness.py) and compare's table of coarse and
# multi_learner (test_compare.py) are under -m slow.
@pytest.mark.parametrize(
    "preset",
    [p if p == "async_single_learner" else pytest.param(p, marks=pytest.mark.slow) for p in sorted(PRESETS)],
)
def test_every_preset_runs_the_quick_start_config(preset: str, tmp_path: Path) -> None:
    """A smoke test per preset: a few iterations of the shipped config, every metric present."""
    run = msrl.train(
        CONFIG,
        [
            f"runs_dir={tmp_path}",
            "progress=false",
            "total_env_steps=10240",
            "eval_episodes=2",
            "checkpoint_every=2",
            *PRESETS[preset],
        ],
    )
    steps = [r["env_steps"] for r in run.metrics]
    assert steps == sorted(set(steps)) and steps[-1] == run.env_steps and run.evaluation.episodes == 2
    if preset == "async_single_learner":
        # rollouts are reported as they land, several to a record, and the two actors' last ones
        # (1,024 steps each) may land after the budget is reached
        assert 10240 <= run.env_steps <= 10240 + 2048 and 2 <= len(run.metrics) <= 6
    else:
        assert run.env_steps == 10240 and len(run.metrics) == 5
    assert {"policy_loss", "approx_kl", "episode_return", "time_env", "time_learn", "steps_per_s"} <= set(
        run.metrics[-1]
    )
    _check_records(preset, run)


@pytest.mark.parametrize(
    "preset",
    [
        pytest.param("single_learner_coarse", marks=pytest.mark.slow),
        pytest.param("single_learner_fine", marks=pytest.mark.slow),
        pytest.param("multi_learner", marks=pytest.mark.slow),
        pytest.param("gpu_only", marks=pytest.mark.slow),
        pytest.param("async_single_learner", marks=pytest.mark.slow),
    ],
)
def test_preset_solves_cartpole(preset: str, tmp_path: Path) -> None:
    run = msrl.train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", *PRESETS[preset]])
    assert run.env_steps >= 150_000
    assert run.evaluation.episodes == 20
    assert run.evaluation.mean >= 475, f"{preset}: greedy return {run.evaluation.mean}"
    _check_records(preset, run)


@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="NCCL all-reduce needs two CUDA devices, one per learner replica"
)
def test_multi_learner_on_gpus_all_reduces_with_nccl(tmp_path: Path) -> None:
    run = msrl.train(
        CONFIG,
        [
            f"runs_dir={tmp_path}",
            "progress=false",
            "total_env_steps=16384",
            "eval_episodes=0",
            "policy=multi_learner",
            "policy.executor=torch",
            "policy.device=cuda",
            "policy.gpus=1",
        ],
    )
    first, second = (replica["learner"]["net"] for replica in _replicas(run, "worker"))
    assert all(torch.equal(first[key], second[key]) for key in first)
