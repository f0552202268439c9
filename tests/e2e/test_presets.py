"""Every distribution preset on a real local Ray: the quick-start config
solves CartPole switched only by ``--set policy=<preset>``, and the transport
is exact (one-replica layouts reproduce the local run bit for bit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from msrl._checkpoint import load_checkpoint
from msrl._run import CHECKPOINT_NAME, METRICS_NAME, train

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")

PRESETS = {
    "single_learner_coarse": ["policy=single_learner_coarse"],
    "single_learner_fine": ["policy=single_learner_fine"],
    "multi_learner": ["policy=multi_learner"],
    "gpu_only": ["policy=gpu_only", "policy.device=cpu"],  # the same one-actor layout where no GPU is lent
    "async_single_learner": ["policy=async_single_learner"],
}


def _metrics(run_dir: str) -> list[dict]:
    with open(Path(run_dir) / METRICS_NAME, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_solves_cartpole(preset: str, tmp_path: Path) -> None:
    result = train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", *PRESETS[preset]])
    assert result.env_steps >= 150_000
    assert len(result.eval_returns) == 20
    assert result.eval_mean >= 475, f"{preset}: greedy return {result.eval_mean}"
    records = _metrics(result.run_dir)
    assert all(r["time_communication"] >= 0 for r in records)
    if preset != "gpu_only":  # values cross fragments: communication time is measured
        assert sum(r["time_communication"] for r in records) > 0
    if preset == "async_single_learner":  # actors run one update behind once the pipeline fills
        lags = [r["policy_lag"] for r in records]
        assert lags[0] == 0 and max(lags) == 1 and sum(lags) > len(lags) / 2
    if preset == "multi_learner":  # all-reduced gradients keep the learner replicas identical
        replicas = load_checkpoint(str(Path(result.run_dir) / CHECKPOINT_NAME))["components"]["_replicas"]["worker"]
        first, second = (replica["learner"]["net"] for replica in replicas)
        assert all(torch.equal(first[key], second[key]) for key in first)


@pytest.mark.parametrize("layout", [["policy=single_learner_fine", "policy.envs=1"],
                                    ["policy=single_learner_coarse", "policy.actors=1"]])
def test_one_replica_layouts_match_local_exactly(layout: list[str], tmp_path: Path) -> None:
    common = [f"runs_dir={tmp_path}", "progress=false", "total_env_steps=8192", "eval_episodes=0"]
    local = _metrics(train(CONFIG, common).run_dir)
    remote = _metrics(train(CONFIG, common + layout).run_dir)
    keys = ["env_steps", "policy_loss", "value_loss", "approx_kl", "episode_return"]
    assert [[r[k] for k in keys] for r in remote] == [[r[k] for k in keys] for r in local]


def test_resume_under_a_distributed_policy_continues_exactly(tmp_path: Path) -> None:
    # a constant learning rate: the annealing schedule follows total_env_steps, which the two halves change
    common = [f"runs_dir={tmp_path}", "progress=false", "eval_episodes=0", "policy=single_learner_coarse", "algo.anneal_lr=false"]
    straight = _metrics(train(CONFIG, common + ["total_env_steps=16384", "name=straight"]).run_dir)
    first = train(CONFIG, common + ["total_env_steps=8192", "name=split"])
    resumed = _metrics(train(None, ["total_env_steps=16384"], resume=str(Path(first.run_dir) / CHECKPOINT_NAME)).run_dir)
    keys = ["iteration", "env_steps", "policy_loss", "value_loss", "episode_return"]
    assert [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in straight]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL all-reduce needs two CUDA devices, one per learner replica")
def test_multi_learner_on_gpus_all_reduces_with_nccl(tmp_path: Path) -> None:
    result = train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", "total_env_steps=16384", "eval_episodes=0",
                            "policy=multi_learner", "policy.executor=torch", "policy.device=cuda", "policy.gpus=1"])
    replicas = load_checkpoint(str(Path(result.run_dir) / CHECKPOINT_NAME))["components"]["_replicas"]["worker"]
    first, second = (replica["learner"]["net"] for replica in replicas)
    assert all(torch.equal(first[key], second[key]) for key in first)
