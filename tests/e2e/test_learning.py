"""Learning tests: the quick-start config solves CartPole under each CPU
executor, switched only by config (fixed seed, greedy return threshold)."""

from __future__ import annotations

from pathlib import Path

import pytest

from msrl._run import train

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")


@pytest.mark.parametrize("executor", ["cpu", "torch"])
def test_ppo_solves_cartpole(executor: str, tmp_path: Path) -> None:
    result = train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", f"policy.executor={executor}"])
    assert result.env_steps >= 150_000
    assert len(result.eval_returns) == 20
    assert result.eval_mean >= 475, f"{executor}: greedy return {result.eval_mean}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_ppo_solves_cartpole_other_seeds(seed: int, tmp_path: Path) -> None:
    result = train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", f"seed={seed}"])
    assert result.eval_mean >= 475, f"seed {seed}: greedy return {result.eval_mean}"
