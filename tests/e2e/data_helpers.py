"""The datasets the slow learning tests train from, made as a user makes them: a checkpoint's
episodes written by ``msrl record``; and small ones for tests of the tools around training, played
straight into a dataset."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
from cli_helpers import REPO, explain, in_process

import msrl


def random_pendulum_data(workdir: Path) -> Path:
    """100 episodes of uniformly random Pendulum actions (``--epsilon 1`` from an untrained DDPG):
    ``benchmarks.offline_learning``'s random level, a random policy's return about -1230."""
    overrides = ["progress=false", "total_env_steps=8", "eval_episodes=0", "algo.learning_starts=100"]
    run = msrl.train(str(REPO / "configs/ddpg_pendulum.yaml"), [f"runs_dir={workdir / 'runs'}", *overrides])
    out = workdir / "pendulum-random"
    result = in_process(
        "record", run.checkpoint, "--episodes", "100", "--out", str(out), "--epsilon", "1", "--seed", "100"
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


def played_pendulum_data(workdir: Path, episodes: int) -> Path:
    """``episodes`` of uniformly random Pendulum-v1 actions (seeds 0, 1, ...), each cut at 200 steps,
    written as a dataset without a checkpoint: for tests that need a dataset, not a learned one."""
    from msrl.core import Box
    from msrl.data import Episode, write_dataset

    env = gymnasium.make("Pendulum-v1")
    env.action_space.seed(0)
    played = []
    for seed in range(episodes):
        observations = [env.reset(seed=seed)[0]]
        actions, rewards = [], []
        for _ in range(200):
            actions.append(env.action_space.sample())
            obs, reward, _, _, _ = env.step(actions[-1])
            observations.append(obs)
            rewards.append(reward)
        cut = np.zeros(200, dtype=bool)
        cut[-1] = True
        played.append(Episode(np.array(observations), np.array(actions), np.array(rewards), np.zeros(200, bool), cut))
    high = np.array([1.0, 1.0, 8.0], dtype=np.float32)
    out = workdir / "pendulum-played"
    write_dataset(out, played, Box(-high, high, (3,)), Box(-2.0, 2.0, (1,)), "test/pendulum-played-v0", "Pendulum-v1")
    return out
