"""The transport between fragments is exact: one-replica layouts reproduce the local run bit for
bit, and a run resumed under a distributed policy continues exactly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import msrl
from msrl.app import Trainer, read_metrics

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")


@pytest.mark.parametrize("layout", [["policy=single_learner_fine", "policy.envs=1"],
                                    ["policy=single_learner_coarse", "policy.actors=1"]])
def test_one_replica_layouts_match_local_exactly(layout: list[str], tmp_path: Path) -> None:
    common = [f"runs_dir={tmp_path}", "progress=false", "total_env_steps=8192", "eval_episodes=0"]
    local = msrl.train(CONFIG, common).metrics
    remote = msrl.train(CONFIG, common + layout).metrics
    keys = ["env_steps", "policy_loss", "value_loss", "approx_kl", "episode_return"]
    assert [[r[k] for k in keys] for r in remote] == [[r[k] for k in keys] for r in local]


def test_resume_under_a_distributed_policy_continues_exactly(tmp_path: Path) -> None:
    """A copy of a run directory taken at a mid-run checkpoint, resumed, ends as the run itself did."""
    # a constant learning rate: the annealing schedule follows total_env_steps, which the two halves change
    common = [f"runs_dir={tmp_path}", "progress=false", "eval_episodes=0", "policy=single_learner_coarse",
              "algo.anneal_lr=false", "total_env_steps=8192", "checkpoint_every=2"]
    with Trainer(CONFIG, common) as trainer:
        while not trainer.done:
            trainer.step()
            if trainer.iteration == 2:  # just checkpointed; the run goes on
                shutil.copytree(trainer.run_dir, tmp_path / "copy")
        straight = read_metrics(trainer.run_dir)
    resumed = msrl.train(None, [], resume=tmp_path / "copy" / "checkpoint.pt").metrics
    keys = ["iteration", "env_steps", "policy_loss", "value_loss", "episode_return"]
    assert len(straight) == 4 and [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in straight]
