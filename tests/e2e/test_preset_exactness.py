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


@pytest.mark.parametrize(  # the fine layout under -m slow: the suite's 6-minute budget
    "layout",
    [
        pytest.param(["policy=single_learner_fine", "policy.envs=1"], marks=pytest.mark.slow),
        ["policy=single_learner_coarse", "policy.actors=1"],
    ],
)
def test_one_replica_layouts_match_local_exactly(layout: list[str], tmp_path: Path) -> None:
    common = [f"runs_dir={tmp_path}", "progress=false", "total_env_steps=8192", "eval_episodes=0"]
    local = msrl.train(CONFIG, common).metrics
    remote = msrl.train(CONFIG, common + layout).metrics
    keys = ["env_steps", "policy_loss", "value_loss", "approx_kl", "episode_return"]
    assert [[r[k] for k in keys] for r in remote] == [[r[k] for k in keys] for r in local]


@pytest.mark.landing  # two Ray runs and a resume, 23-26 s: CI's tier after the default suite
def test_resume_under_a_distributed_policy_continues_exactly(tmp_path: Path) -> None:
    """A copy of a run directory taken at a mid-run checkpoint, resumed, ends as the run itself did."""
    # a constant learning rate: the annealing schedule follows total_env_steps, which the two halves change
    common = [
        f"runs_dir={tmp_path}",
        "progress=false",
        "eval_episodes=0",
        "policy=single_learner_coarse",
        "algo.anneal_lr=false",
        "total_env_steps=8192",
        "checkpoint_every=2",
    ]
    with Trainer(CONFIG, common) as trainer:
        while not trainer.done:
            trainer.step()
            if trainer.iteration == 2:  # just checkpointed; the run goes on
                shutil.copytree(trainer.run_dir, tmp_path / "copy")
        straight = read_metrics(trainer.run_dir)
    resumed = msrl.train(None, [], resume=tmp_path / "copy" / "checkpoint.pt").metrics
    keys = ["iteration", "env_steps", "policy_loss", "value_loss", "episode_return"]
    assert len(straight) == 4 and [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in straight]


@pytest.mark.slow  # about 18 s: two learner copies under multi_learner; the suite's 6-minute budget
def test_learner_copies_share_observation_statistics(tmp_path: Path) -> None:
    """multi_learner: each copy sees half the observations, yet every actor copy normalises with the
    statistics of all of them (the learners average their batch moments), as local's one actor does.
    Per-copy statistics drifted apart and cost PPO-Pendulum up to 500 return (BENCHMARKS.md, "Does every
    algorithm learn under every preset?")."""
    import torch

    run = msrl.train(
        str(REPO / "configs" / "ppo_pendulum.yaml"),
        [
            f"runs_dir={tmp_path}",
            "progress=false",
            "eval_episodes=0",
            "policy=multi_learner",
            "total_env_steps=512",
            "algo.num_steps=16",
        ],
    )
    state = torch.load(run.checkpoint, weights_only=True)["components"]
    copies = [replica["actor"]["obs_stats"] for replica in state["_replicas"]["worker"]]
    learners = [replica["learner"]["obs_stats"] for replica in state["_replicas"]["worker"]]
    assert len(copies) == 2 and copies[0]["count"] == 2 * 8 * 16  # two updates, each of a copy's 8 envs x 16 steps
    for stats in copies[1:] + learners:
        assert torch.equal(stats["mean"], copies[0]["mean"]) and torch.equal(stats["var"], copies[0]["var"])
    assert (copies[0]["var"] > 0.01).all() and not torch.equal(copies[0]["var"], torch.ones(3, dtype=torch.float64))
    first, second = (replica["learner"]["net"] for replica in state["_replicas"]["worker"])
    assert all(torch.equal(first[key], second[key]) for key in first)  # all-reduced gradients: equal weights
    # ...but each copy samples actions from its own stream (run.data_seed), not the same noise twice
    draws = [replica["actor"]["generator"] for replica in state["_replicas"]["worker"]]
    assert not torch.equal(draws[0], draws[1])
