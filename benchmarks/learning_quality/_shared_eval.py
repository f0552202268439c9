"""Greedy evaluation on start states every framework and seed share (``benchmarks.learning_quality --shared-eval``).

Each framework's own evaluation draws its start states from its run's seed: msrl's from the
run's ``eval`` stream, SB3's from ``make_vec_env(seed=seed + EVAL_SEED_OFFSET)``, whose env ``i``
is seeded ``seed + EVAL_SEED_OFFSET + i``, so that SB3's seeds 0-4 share 16 to 19 of their 20
start states while msrl's share none.  On Pendulum, where one greedy episode's return depends on
its start by ±90, that alone makes SB3's spread over seeds look several times tighter than msrl's.
Here every policy plays the same ``episodes`` gymnasium environments, reset with seeds
``SHARED_EVAL_SEED + i``: the comparison is paired, start state by start state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

SHARED_EVAL_SEED = 1_000_003
"""The first start-state seed: far from every training and evaluation seed the runs use."""


def shared_eval(env_id: str, episodes: int, act: Callable[[np.ndarray], Any]) -> list[float]:
    """Returns of ``act`` (a batch of observations -> a batch of actions, greedy) over ``episodes``
    gymnasium ``env_id`` environments reset with seeds ``SHARED_EVAL_SEED + i``, stepped together
    until each episode ends."""
    import gymnasium as gym

    envs = [gym.make(env_id) for _ in range(episodes)]
    try:
        obs = np.stack([env.reset(seed=SHARED_EVAL_SEED + i)[0] for i, env in enumerate(envs)])
        returns = np.zeros(episodes)
        running = np.ones(episodes, dtype=bool)
        while running.any():
            actions = np.asarray(act(obs))
            for i in np.flatnonzero(running):
                next_obs, reward, terminated, truncated, _ = envs[i].step(actions[i])
                returns[i] += float(reward)
                obs[i] = next_obs
                running[i] = not (terminated or truncated)
    finally:
        for env in envs:
            env.close()
    return returns.tolist()


def msrl_act(checkpoint: Any) -> Callable[[np.ndarray], Any]:
    """The greedy actions of a trained msrl run (``msrl.load``), as NumPy."""
    import torch

    import msrl

    actor = msrl.load(checkpoint).actor

    def act(obs: np.ndarray) -> Any:
        with torch.no_grad():
            action = actor.greedy(obs.astype(np.float32))
        return action.cpu().numpy() if isinstance(action, torch.Tensor) else action

    return act


def sb3_act(model: Any) -> Callable[[np.ndarray], Any]:
    """The deterministic actions of an SB3 model, its observations normalised as in training
    (VecNormalize's statistics) where it trained normalised."""
    norm = model.get_vec_normalize_env()

    def act(obs: np.ndarray) -> Any:
        return model.predict(norm.normalize_obs(obs) if norm is not None else obs, deterministic=True)[0]

    return act
