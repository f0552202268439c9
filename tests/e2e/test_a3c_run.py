"""A3C's gradients crossing a cut edge on Ray workers: under ``single_learner_coarse`` both actors'
gradients of an iteration are computed at the same weights and applied in turn (staleness 0 and 1);
under ``async_single_learner`` the actors compute their next gradients while the learner applies the
last ones, so each arrives at least two steps stale, within the configured bound.  Every gradient is
one optimiser step: the learner's weights version counts two per iteration."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from msrl.app import Trainer

pytestmark = [pytest.mark.usefixtures("shared_ray"), pytest.mark.landing]  # two Ray workers and a learner each

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "a3c_cartpole.yaml")


@pytest.mark.parametrize(
    ("preset", "mean", "largest"),
    [("single_learner_coarse", (0.5, 0.5), (1.0, 1.0)), ("async_single_learner", (2.0, 3.5), (2.0, 4.0))],
)
def test_actors_gradients_reach_the_learner_and_their_staleness_is_reported(
    preset: str, mean: tuple[float, float], largest: tuple[float, float], tmp_path: Path
) -> None:
    overrides = [
        f"runs_dir={tmp_path}",
        "progress=false",
        "eval_episodes=0",
        "algo.compile=false",
        "total_env_steps=2000",
        f"policy={preset}",
        "policy.actors=2",
    ]
    with Trainer(CONFIG, overrides, stream=io.StringIO()) as trainer:
        records = []
        while not trainer.done:
            records.append(trainer.step())
        state = trainer.runtime.state_dict()
    iterations = len(records)
    assert iterations == 2000 // 40
    assert state["learner"]["updates"] == 2 * iterations  # one optimiser step per actor per iteration
    applied = [r for r in records[2:] if "staleness" in r]  # after the async start-up
    assert applied and all(r["dropped_gradients"] == 0.0 for r in records)
    assert all(mean[0] <= r["staleness"] <= mean[1] for r in applied), [r["staleness"] for r in applied]
    assert all(largest[0] <= r["staleness_max"] <= largest[1] for r in applied)
    assert all(r["value_loss"] > 0 for r in applied)
