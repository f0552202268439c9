"""``msrl record``: episodes of a trained policy written as a dataset (Minari's format,
``msrl.data``), for learning from data.  The policy's greedy action, replaced with probability
``epsilon`` by a uniformly random one and, for Box actions, with Gaussian noise of ``noise`` times
half the action range added and clipped to the bounds: D4RL's recipe makes random (epsilon 1),
medium (a checkpoint partway) and expert (the final checkpoint) data this way."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import msrl.envs
from msrl.app._checkpoint import load_checkpoint
from msrl.app._config import load_config
from msrl.app._evaluate import _to_numpy, acting_parts
from msrl.app._load import load_components
from msrl.app._plan import recipe_of
from msrl.core import Box, ConfigError, Discrete, Role
from msrl.data import DatasetInfo, Episode, write_dataset

MAX_EPISODE_STEPS = 100_000
"""A recorded episode longer than this stops the recording: a bound on time and memory."""


@dataclass(frozen=True)
class Recording:
    """What ``record`` wrote: the dataset and its episodes' returns."""

    info: DatasetInfo
    returns: list[float]

    def __str__(self) -> str:
        spread = statistics.pstdev(self.returns) if len(self.returns) > 1 else 0.0
        return (
            f"recorded {self.info.total_episodes} episodes ({self.info.total_steps:,} steps) into {self.info.path}: "
            f"return {statistics.fmean(self.returns):.1f} ± {spread:.1f}"
        )


def record(
    checkpoint: str | os.PathLike[str],
    episodes: int,
    out: str | os.PathLike[str],
    epsilon: float = 0.0,
    noise: float = 0.0,
    seed: int = 0,
    num_envs: int = 8,
    dataset_id: str | None = None,
) -> Recording:
    """Record ``episodes`` whole episodes of ``checkpoint``'s policy on its environment (as it
    trained: the same keywords) into a new dataset folder ``out``, stepping ``num_envs``
    environments seeded from ``seed``; episodes are kept in the order they end."""
    _check_options(episodes, epsilon, noise, num_envs)
    if Path(out).exists():
        raise ConfigError(f"--out {out} exists; msrl record writes a new dataset folder (nothing was written)")
    payload = load_checkpoint(os.fspath(checkpoint))
    config = load_config(None, base=payload["config"])
    algorithm = load_components(recipe_of(config), payload["components"], only=(Role.ACTOR,))
    spec, actor, _ = acting_parts(algorithm, "msrl record")
    obs_space, action_space = spec.observation_space, spec.action_space
    if not isinstance(obs_space, Box) or not isinstance(action_space, (Box, Discrete)):
        raise ConfigError(
            f"msrl record writes single-agent Box observations and Box or Discrete actions; {spec.env_id} has "
            f"{obs_space or 'per-group'} observations and {action_space or 'per-group'} actions"
        )
    count = min(num_envs, episodes)
    env = msrl.envs.make(spec.env_id, num_envs=count, seed=seed, **spec.kwargs)
    try:
        if not callable(getattr(env, "final_obs", None)):
            raise ConfigError(f"msrl record needs an environment with final_obs(); {spec.env_id} has none")
        rng = np.random.default_rng(seed)
        explore = _Exploration(action_space, epsilon, noise, rng)
        recorded = list(_episodes(env, actor, explore, episodes, seed))
    finally:
        env.close()
    metadata = {
        "algorithm_name": str(config.run.algorithm),
        "description": (
            f"{episodes} episodes of {config.run.algorithm} ({config.run.name}) from {os.fspath(checkpoint)} at "
            f"{int(payload['env_steps']):,} env steps, epsilon {epsilon}, noise {noise}, seed {seed}"
        ),
        "msrl_checkpoint_env_steps": int(payload["env_steps"]),
        "msrl_epsilon": float(epsilon),
        "msrl_noise": float(noise),
        "msrl_seed": int(seed),
    }
    info = write_dataset(
        out,
        recorded,
        obs_space,
        action_space,
        dataset_id or f"msrl/{Path(out).name}-v0",
        spec.env_id,
        dict(spec.kwargs),
        metadata,
    )
    return Recording(info, [episode.episode_return for episode in recorded])


def _check_options(episodes: int, epsilon: float, noise: float, num_envs: int) -> None:
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ConfigError(f"--episodes must be a positive integer, got {episodes!r}")
    if not 0.0 <= epsilon <= 1.0:
        raise ConfigError(f"--epsilon must be in [0, 1], got {epsilon}")
    if not (noise >= 0.0 and np.isfinite(noise)):
        raise ConfigError(f"--noise must be a finite number >= 0, got {noise}")
    if num_envs < 1:
        raise ConfigError(f"--envs must be >= 1, got {num_envs}")


class _Exploration:
    """The recorded action: the greedy one, made random with probability ``epsilon``, noised."""

    def __init__(self, space: Box | Discrete, epsilon: float, noise: float, rng: np.random.Generator) -> None:
        self.space, self.epsilon, self.noise, self.rng = space, epsilon, noise, rng
        if isinstance(space, Box):
            shape = tuple(space.shape)
            self.low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), shape)
            self.high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), shape)

    def __call__(self, greedy: np.ndarray) -> np.ndarray:
        rows = greedy.shape[0]
        random = np.asarray(self.rng.random(rows) < self.epsilon)
        if isinstance(self.space, Discrete):
            drawn = self.rng.integers(0, self.space.n, size=rows)
            return np.where(random, drawn, greedy).astype(np.int64)
        action = np.asarray(greedy, dtype=np.float64)
        if self.noise > 0:
            action = action + self.noise * (self.high - self.low) / 2 * self.rng.standard_normal(action.shape)
        uniform = self.rng.uniform(self.low, self.high, size=action.shape)
        action = np.where(random.reshape((rows,) + (1,) * (action.ndim - 1)), uniform, action)
        return np.clip(action, self.low, self.high).astype(np.float32)


def _episodes(env: Any, actor: Any, explore: _Exploration, wanted: int, seed: int) -> Iterator[Episode]:
    """Whole episodes of every environment in the order they end, ``wanted`` of them; each holds
    its last observation (``final_obs``) after its last action."""
    obs = _to_numpy(env.reset(seed=seed))
    env.final_obs()  # from here on the environment keeps each ended episode's last observation
    actor.reset_greedy()
    count = obs.shape[0]
    steps: list[list[tuple[Any, ...]]] = [[] for _ in range(count)]
    done = 0
    while done < wanted:
        action = explore(np.asarray(_to_numpy(actor.greedy(obs))))
        next_obs, reward, terminated, truncated = (_to_numpy(v) for v in env.step(action))
        last = _to_numpy(env.final_obs())
        for i in range(count):
            steps[i].append((obs[i], action[i], float(reward[i]), bool(terminated[i]), bool(truncated[i])))
            if terminated[i] or truncated[i]:
                if done < wanted:
                    yield _episode(steps[i], last[i])
                    done += 1
                steps[i] = []
            elif len(steps[i]) >= MAX_EPISODE_STEPS:
                raise ConfigError(f"an episode ran past {MAX_EPISODE_STEPS:,} steps without ending: not recorded")
        obs = next_obs


def _episode(steps: list[tuple[Any, ...]], last_obs: np.ndarray) -> Episode:
    obs, actions, rewards, terminated, truncated = zip(*steps)
    return Episode(
        observations=np.stack([*obs, last_obs]).astype(np.float32),
        actions=np.stack(actions),
        rewards=np.asarray(rewards, dtype=np.float64),
        terminations=np.asarray(terminated, dtype=bool),
        truncations=np.asarray(truncated, dtype=bool),
    )
