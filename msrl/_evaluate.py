"""Greedy evaluation: run the actor's most likely action on fresh environments."""

from __future__ import annotations

from typing import Any

import numpy as np

import msrl.envs
from msrl._errors import ConfigError
from msrl._tracing import role_of


def evaluate(algorithm: Any, episodes: int, seed: int, max_steps: int = 100_000) -> list[float]:
    """Return of one greedy episode in each of ``episodes`` parallel environments."""
    components = algorithm.components()
    envs = [c for c in components.values() if role_of(c) == "env"]
    actors = [c for c in components.values() if role_of(c) == "actor"]
    if len(envs) != 1 or len(actors) != 1:
        raise ConfigError("evaluation needs exactly one environment and one actor component")
    spec = envs[0].spec
    env = msrl.envs.make(spec.env_id, num_envs=episodes, seed=seed, backend="numpy", **spec.kwargs)
    obs = env.reset(seed=seed)
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    for _ in range(max_steps):
        action = np.asarray(_to_numpy(actors[0].greedy(obs)))
        obs, reward, terminated, truncated = env.step(action)
        returns += np.where(running, _to_numpy(reward), 0.0)
        running &= ~((_to_numpy(terminated) + _to_numpy(truncated)) > 0)
        if not running.any():
            break
    return returns.tolist()


def _to_numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
