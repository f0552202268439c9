"""The pixel-policy probe reads a checkpoint of a convolutional actor-critic and shows it the
config's frames: an untrained policy is uniform on every frame (the heads start near zero), a
trained one must be told apart from it, and the dead-feature share is a fraction of the torso."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.pixel_policy import measure
from msrl.app import CHECKPOINT_NAME, Trainer

REPO = Path(__file__).resolve().parents[2]


def test_an_untrained_minatar_policy_reads_as_uniform_on_every_frame(tmp_path: Path) -> None:
    overrides = [f"runs_dir={tmp_path}", "algo.num_envs=4", "algo.num_steps=8", "total_env_steps=32"]
    with Trainer(str(REPO / "configs" / "ppo_minatar.yaml"), [*overrides, "algo.compile=false"]) as trainer:
        trainer.save()  # before any update: the network as drawn
        checkpoint = Path(trainer.run_dir) / CHECKPOINT_NAME
    row = measure(str(checkpoint), num_envs=2, steps=30, every=3, seed=0)
    assert abs(row["entropy"] - math.log(3)) < 0.01  # MinAtar Breakout: 3 actions
    assert row["logit std across frames"] < 0.05
    assert 0.0 <= row["features never active"] < 1.0
