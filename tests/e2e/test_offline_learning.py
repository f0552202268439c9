"""The offline algorithms learn from data with their shipped configs (``-m slow``): 100 episodes of
uniformly random Pendulum actions recorded by ``msrl record --epsilon 1`` (the random level of
``benchmarks.offline_learning``: a random policy's return there is about -1230, the SAC expert's
-156), a fixed seed, and a greedy-return bar far above the data's own.  IQL and AWAC take about a
minute each on 2 cores; CQL, whose critics evaluate 30 actions a state, several."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import REPO, explain, in_process

import msrl

pytestmark = pytest.mark.slow

LEARNING = {
    # seed 1 at 5,000 gradient steps, BENCHMARKS.md "Learning from data": IQL -473.6, AWAC {awac}
    "iql_pendulum": (5_000, -700.0),
    "awac_pendulum": (5_000, -700.0),
    "cql_pendulum": (2_000, -900.0),
}
"""config -> (gradient steps of 256, greedy-return bar)."""


@pytest.fixture(scope="module")
def random_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    overrides = ["progress=false", "total_env_steps=8", "eval_episodes=0", "algo.learning_starts=100"]
    run = msrl.train(str(REPO / "configs/ddpg_pendulum.yaml"), [f"runs_dir={runs}", *overrides])
    out = tmp_path_factory.mktemp("data") / "pendulum-random"
    result = in_process(
        "record", run.checkpoint, "--episodes", "100", "--out", str(out), "--epsilon", "1", "--seed", "100"
    )
    assert result.returncode == 0, explain(result)
    return out


@pytest.mark.parametrize("name", sorted(LEARNING))
def test_offline_algorithm_learns_from_random_data(name: str, random_data: Path, tmp_path: Path) -> None:
    steps, bar = LEARNING[name]
    overrides = [f"runs_dir={tmp_path}", f"algo.dataset={random_data}", f"total_env_steps={256 * steps}"]
    run = msrl.train(str(REPO / f"configs/{name}.yaml"), [*overrides, "progress=false", "checkpoint_every=0"])
    assert run.evaluation is not None and run.evaluation.episodes == 20
    assert run.evaluation.mean >= bar, f"{name}: greedy return {run.evaluation.mean}"
