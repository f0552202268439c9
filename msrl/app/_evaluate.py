"""Greedy evaluation: run the actor's most likely action on fresh environments (for a multi-agent
environment, every group's; the return is the mean over agents, as in training's metrics)."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import msrl.envs
from msrl.core import ConfigError, Role, component_class, role_of


@dataclass(frozen=True)
class Evaluation:
    """The returns of greedy episodes, one per fresh environment."""

    returns: list[float]

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.returns)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.returns) if len(self.returns) > 1 else 0.0

    def __str__(self) -> str:
        return f"greedy evaluation return: {self.mean:.1f} ± {self.std:.1f} over {self.episodes} episodes"


def evaluate_algorithm(algorithm: Any, episodes: int, seed: int, max_steps: int = 100_000) -> Evaluation:
    """One greedy episode in each of ``episodes`` fresh environments, on the environment's
    default (host) backend, whatever backend training stepped, with the keywords its class lists in
    ``evaluation_kwargs`` (an Atari game's score: rewards unclipped, whole games).  An algorithm
    that learns from a dataset, with no environment component, names the environment it is
    evaluated on as its ``eval_env`` (an ``msrl.envs.spec``)."""
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    spec, actor, scoring = acting_parts(algorithm, "evaluation")
    env = msrl.envs.make(spec.env_id, num_envs=episodes, seed=seed, **{**spec.kwargs, **scoring})
    try:
        obs = env.reset(seed=seed)
        actor.reset_greedy()
        returns = np.zeros(episodes)
        running = np.ones(episodes, dtype=bool)
        for _ in range(max_steps):
            action = actor.greedy(obs)
            action = (
                {group: _to_numpy(a) for group, a in action.items()}
                if isinstance(action, dict)
                else np.asarray(_to_numpy(action))
            )
            obs, reward, terminated, truncated = env.step(action)
            returns += np.where(running, _mean_reward(reward), 0.0)
            running &= ~((_to_numpy(terminated) + _to_numpy(truncated)) > 0)
            if not running.any():
                break
    finally:
        env.close()
    return Evaluation(returns.tolist())


def acting_parts(algorithm: Any, what: str) -> tuple[Any, Any, dict[str, Any]]:
    """The environment an algorithm's policy acts in (its environment component's ``spec``, or for
    an algorithm that learns from a dataset its ``eval_env``), its one actor, and the keywords the
    environment's class lists in ``evaluation_kwargs`` (the game's own rewards and episodes where
    training shaped them: Atari's clipping, episodic life); ``what`` names the caller in the error."""
    components = algorithm.components()
    envs = [c for c in components.values() if role_of(c) is Role.ENV]
    actors = [c for c in components.values() if role_of(c) is Role.ACTOR]
    offline = getattr(algorithm, "eval_env", None) if not envs else None
    if (len(envs) != 1 and offline is None) or len(actors) != 1:
        raise ConfigError(f"{what} needs exactly one environment (or an eval_env) and one actor component")
    if not envs:
        return offline, actors[0], {}
    return envs[0].spec, actors[0], getattr(component_class(envs[0]), "evaluation_kwargs", {})


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` meanwhile, and back to what they were after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _mean_reward(reward: Any) -> np.ndarray:
    """Per environment: the reward, or for a multi-agent environment (a dict of ``(envs, agents)``
    rewards per group) the mean over all its agents, as its ``episode_return`` metric counts it."""
    if not isinstance(reward, dict):
        return _to_numpy(reward)
    parts = [_to_numpy(r) for r in reward.values()]
    return sum(p.sum(1) for p in parts) / sum(p.shape[1] for p in parts)


def _to_numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
