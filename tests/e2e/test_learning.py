"""Learning tests: the quick-start config solves CartPole under each CPU
executor, switched only by config, and learns gymnasium's Acrobot when only its
``env_id`` changes (fixed seeds, greedy return thresholds; the longer runs under
``-m slow``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import msrl

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")


@pytest.mark.parametrize("executor", ["cpu", pytest.param("torch", marks=pytest.mark.slow)])
def test_ppo_solves_cartpole(executor: str, tmp_path: Path) -> None:
    run = msrl.train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", f"policy.executor={executor}"])
    assert run.env_steps >= 150_000
    assert run.evaluation.episodes == 20
    assert run.evaluation.mean >= 475, f"{executor}: greedy return {run.evaluation.mean}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_ppo_solves_cartpole_other_seeds(seed: int, tmp_path: Path) -> None:
    run = msrl.train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", f"seed={seed}"])
    assert run.evaluation.mean >= 475, f"seed {seed}: greedy return {run.evaluation.mean}"


# -- any gymnasium environment, with the quick-start config unchanged but for its id ---------------------
ACROBOT = ["algo.env_id=Acrobot-v1"]


@pytest.mark.slow  # 150k steps of gymnasium's Acrobot: about 20 s under local
@pytest.mark.parametrize("policy", ["local", "single_learner_coarse"])
def test_ppo_learns_acrobot_through_gymnasium(policy: str, tmp_path: Path) -> None:
    run = msrl.train(CONFIG, [f"runs_dir={tmp_path}", "progress=false", f"policy={policy}", *ACROBOT])
    assert run.evaluation.episodes == 20
    assert run.evaluation.mean >= -100, f"{policy}: greedy return {run.evaluation.mean}"
    assert run.metrics[-1]["episode_length"] < 200  # episodes end at the goal, not the 500-step limit


@pytest.mark.slow  # about 10 s: the suite's 6-minute budget
def test_a_gymnasium_env_runs_under_gpu_only_on_the_cpu(tmp_path: Path) -> None:
    """The torch executor prefers torch environments; one that only gymnasium has runs on its host backend."""
    run = msrl.train(
        CONFIG,
        [
            f"runs_dir={tmp_path}",
            "progress=false",
            "policy=gpu_only",
            "policy.device=cpu",
            "total_env_steps=6144",
            "eval_episodes=2",
            *ACROBOT,
        ],
    )
    assert run.env_steps == 6144 and run.evaluation.episodes == 2
    assert all(-500 <= r <= 0 for r in run.evaluation.returns)
