"""gym 0.23's API, as much as CORL's offline files use, over gymnasium (README.md)."""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np


class Env:
    """gym's old environment API: ``seed``, ``reset() -> obs``, ``step -> (obs, reward, done, info)``."""

    observation_space: Any
    action_space: Any

    def seed(self, seed: int | None = None) -> None:
        raise NotImplementedError

    def reset(self) -> np.ndarray:
        raise NotImplementedError

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        raise NotImplementedError


class _Gymnasium(Env):
    """A gymnasium environment under the old API: ``seed`` applies at the next reset, and an episode
    is done when it terminates or is cut by its time limit (gym's ``TimeLimit`` did the same)."""

    def __init__(self, env: gymnasium.Env) -> None:
        self.env = env
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self._seed: int | None = None

    def seed(self, seed: int | None = None) -> None:
        self._seed = seed

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self._seed)
        self._seed = None
        return obs

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward), bool(terminated or truncated), info

    def get_normalized_score(self, score: Any) -> Any:
        """D4RL's normalised score (0 the random data's return, 1 the expert's), on msrl's references."""
        low, high = float(os.environ["MSRL_CORL_REF_MIN"]), float(os.environ["MSRL_CORL_REF_MAX"])
        return (np.asarray(score) - low) / (high - low)


def make(name: str) -> Env:
    """The environment ``MSRL_CORL_ENV_ID`` (the dataset's); D4RL's ``name`` only names the run."""
    return _Gymnasium(gymnasium.make(os.environ["MSRL_CORL_ENV_ID"]))


class Wrapper(Env):
    def __init__(self, env: Env) -> None:
        self.env = env
        self.observation_space, self.action_space = env.observation_space, env.action_space

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def seed(self, seed: int | None = None) -> None:
        self.env.seed(seed)

    def reset(self) -> np.ndarray:
        return self.env.reset()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        return self.env.step(action)


class TransformObservation(Wrapper):
    def __init__(self, env: Env, f: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__(env)
        self.f = f

    def reset(self) -> np.ndarray:
        return self.f(self.env.reset())

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        obs, reward, done, info = self.env.step(action)
        return self.f(obs), reward, done, info


class TransformReward(Wrapper):
    def __init__(self, env: Env, f: Callable[[float], float]) -> None:
        super().__init__(env)
        self.f = f

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        obs, reward, done, info = self.env.step(action)
        return obs, self.f(reward), done, info


wrappers = types.SimpleNamespace(TransformObservation=TransformObservation, TransformReward=TransformReward)
