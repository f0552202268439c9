"""Recurrent MAPPO and IPPO (``algo.recurrent``, the paper's rMAPPO) end to end: trained under every
distribution preset unchanged, evaluated alike however often, saved, loaded and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_multi_agent import CI_ENVS, CI_SPREAD, MARGIN_SPREAD, SPREAD, random_spread_return

import msrl
from msrl.app import CHECKPOINT_NAME, Trainer

RECURRENT = ["progress=false", CI_ENVS, "algo.recurrent=true", "algo.update_epochs=2", "checkpoint_every=0"]


def test_recurrent_mappo_evaluates_alike_every_time_and_resumes(tmp_path: Path) -> None:
    """Evaluation starts every episode from a blank memory (``reset_greedy``): two evaluations of
    the same weights agree, and a checkpoint's evaluation agrees with the live run's.  A resumed
    run goes on from the checkpoint's memories."""
    with Trainer(SPREAD, [f"runs_dir={tmp_path}", "total_env_steps=800", "eval_episodes=0", *RECURRENT]) as trainer:
        trainer.step()
        first, again = trainer.evaluate(episodes=6, seed=3), trainer.evaluate(episodes=6, seed=3)
        assert first.returns == again.returns
        trainer.save()
        checkpoint = Path(trainer.run_dir) / CHECKPOINT_NAME
    assert msrl.evaluate(checkpoint, episodes=6, seed=3).returns == first.returns
    with Trainer(None, ["total_env_steps=1200"], resume=checkpoint) as resumed:
        assert resumed.env_steps == 400
        metrics = resumed.step()
        assert resumed.env_steps == 800 and metrics["episodes"] > 0


@pytest.mark.parametrize(
    "preset",
    [
        "local",
        *(
            pytest.param(name, marks=pytest.mark.slow)
            for name in (
                "single_learner_coarse",
                "single_learner_fine",
                "multi_learner",
                "async_single_learner",
                "gpu_only",
            )
        ),
    ],
)
def test_recurrent_mappo_runs_under_every_preset(preset: str, tmp_path: Path) -> None:
    """Each actor copy keeps its own environments' memories; the learner replays whole
    environments, whichever fragment they came from."""
    extra = ["policy.device=cpu"] if preset == "gpu_only" else []
    run = msrl.train(
        SPREAD,
        [f"runs_dir={tmp_path}", "total_env_steps=1600", "eval_episodes=2", f"policy={preset}", *RECURRENT, *extra],
    )
    assert run.env_steps >= 1600 and run.metrics[-1]["agent_steps"] == 3 * run.metrics[-1]["env_steps"]
    assert 0.0 < run.metrics[-1]["approx_kl"] < 0.5  # the replay matches the rollout closely enough to learn from


@pytest.mark.slow  # about 90 s on a core of the 2-core VM
def test_the_papers_recurrent_network_learns_simple_spread(tmp_path: Path) -> None:
    """rMAPPO with the paper's LayerNorms at 120k steps, CI's simple_spread check: seed 1 reached
    -19.6 greedy over 32 episodes (2026-11-29) against a random policy's -28.4."""
    random_return = random_spread_return()
    overrides = ["checkpoint_every=0", "total_env_steps=120000", *CI_SPREAD]
    network = ["algo.recurrent=true", "algo.layer_norm=true"]
    run = msrl.train(SPREAD, [f"runs_dir={tmp_path}", *overrides, *network])
    assert run.evaluation.mean >= random_return + MARGIN_SPREAD, (run.evaluation.mean, random_return)
