"""The offline algorithms learn from data with their shipped configs (``-m slow``): 100 episodes of
uniformly random Pendulum actions recorded by ``msrl record --epsilon 1`` (the random level of
``benchmarks.offline_learning``: a random policy's return there is about -1230, the SAC expert's
-156), a fixed seed, and a greedy-return bar far above the data's own.  IQL and AWAC take about a
minute each on 2 cores, CQL half an hour.  GAIL imitates
20 episodes of the shipped PPO config's CartPole expert, never seeing the environment's reward."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import REPO
from data_helpers import cartpole_demonstrations, random_pendulum_data

import msrl

pytestmark = pytest.mark.slow

LEARNING = {
    # seed 1 at 5,000 gradient steps (BENCHMARKS.md, "Learning from data"): IQL -523.8 (states
    # standardised, the shipped config), AWAC -254.9; the bar is halfway from the random data's -1230
    # to the expert's -156
    "iql_pendulum": (5_000, -700.0),
    "awac_pendulum": (5_000, -700.0),
    # seed 1 at 10,000 gradient steps: -276.1 (about 30 minutes on 2 cores: its critics value 30 more
    # actions for every state; at 2,000 steps it is still at the random data's -1231.5)
    "cql_pendulum": (10_000, -700.0),
}
"""config -> (gradient steps of 256, greedy-return bar)."""


@pytest.fixture(scope="module")
def random_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return random_pendulum_data(tmp_path_factory.mktemp("data"))


@pytest.mark.timeout(3600)  # CQL's 10,000 steps are half an hour on 2 cores; the suite's 600 s is not enough
@pytest.mark.parametrize("name", sorted(LEARNING))
def test_offline_algorithm_learns_from_random_data(name: str, random_data: Path, tmp_path: Path) -> None:
    steps, bar = LEARNING[name]
    overrides = [f"runs_dir={tmp_path}", f"algo.dataset={random_data}", f"total_env_steps={256 * steps}"]
    run = msrl.train(str(REPO / f"configs/{name}.yaml"), [*overrides, "progress=false", "checkpoint_every=0"])
    assert run.evaluation is not None and run.evaluation.episodes == 20
    assert run.evaluation.mean >= bar, f"{name}: greedy return {run.evaluation.mean}"


def test_gail_imitates_an_expert_from_its_demonstrations(tmp_path: Path) -> None:
    demos = cartpole_demonstrations(tmp_path)
    overrides = [f"runs_dir={tmp_path}", f"algo.demonstrations={demos}", "total_env_steps=150000", "progress=false"]
    run = msrl.train(str(REPO / "configs/gail_cartpole.yaml"), [*overrides, "checkpoint_every=0"])
    assert run.evaluation is not None and run.evaluation.mean >= 475.0, run.evaluation
