"""The datasets the slow learning tests train from, made as a user makes them: a checkpoint's
episodes written by ``msrl record``."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import REPO, explain, in_process

import msrl


def random_pendulum_data(workdir: Path, episodes: int = 100) -> Path:
    """``episodes`` of uniformly random Pendulum actions (``--epsilon 1`` from an untrained DDPG):
    ``benchmarks.offline_learning``'s random level, a random policy's return about -1230."""
    overrides = ["progress=false", "total_env_steps=8", "eval_episodes=0", "algo.learning_starts=100"]
    run = msrl.train(str(REPO / "configs/ddpg_pendulum.yaml"), [f"runs_dir={workdir / 'runs'}", *overrides])
    out = workdir / "pendulum-random"
    result = in_process(
        "record", run.checkpoint, "--episodes", str(episodes), "--out", str(out), "--epsilon", "1", "--seed", "100"
    )
    assert result.returncode == 0, explain(result)
    return out


def cartpole_demonstrations(workdir: Path) -> Path:
    """20 episodes of the shipped PPO config's CartPole expert (greedy 500), GAIL's demonstrations."""
    expert = msrl.train(str(REPO / "configs/ppo_cartpole.yaml"), [f"runs_dir={workdir / 'runs'}", "progress=false"])
    assert expert.evaluation is not None and expert.evaluation.mean == 500.0
    out = workdir / "cartpole-expert"
    result = in_process("record", expert.checkpoint, "--episodes", "20", "--out", str(out))
    assert result.returncode == 0, explain(result)
    return out
