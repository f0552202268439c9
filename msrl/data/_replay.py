"""A recorded dataset as the replay an offline learner samples: the buffer component that takes an
environment's place in a training loop with no environment in it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from msrl.core import Batched, ConfigError, DatasetError, load_generator_state
from msrl.data._minari import DatasetInfo, read_episodes, read_info, transitions
from msrl.rl import ReplayBatch, ReplayBuffer, action_layout, observation_shape


class DatasetReplay(ReplayBuffer):
    """The episodes of a dataset (``msrl record``'s, or Minari's), sampled uniformly with
    replacement within each of ``len(seeds)`` strata: ``sample()`` gives ``num_batches`` batches of
    ``batch_size`` transitions, a ``ReplayBatch`` as the replay of an online run does.  Transitions
    cut by a time limit keep their episode's last observation and bootstrap (``terminated`` 0).

    The dataset's ``E`` episodes are cut into ``S = len(seeds)`` strata of ``E // S`` or so
    episodes each; every batch takes an equal share of its rows from each stratum, drawn by that
    stratum's own random stream (``seeds[s]``, the same in every copy).  Copy ``index`` of
    ``parts`` (``part``: ``RunInfo.part``; ``parts`` must divide ``S``) holds whole strata, and its
    ``batch_size`` is its share of the run's batch: whatever the number of copies, the run draws the
    same transitions, in the same order when the copies' batches are put side by side.  Learners
    that average their gradients over copies then step as one learner with the run's batch does.

    Each ``sample`` call counts as ``steps_per_sample`` steps of the run (its rows): an offline
    run's budget, ``total_env_steps``, is the transitions its learner trains on.  Where an
    environment's steps are the run's (demonstrations beside an environment: GAIL's),
    ``counts_steps=False`` leaves them uncounted.  A checkpoint
    holds the strata's random streams and which dataset it was, not the data: a run resumes on the
    same dataset or stops with one line.  ``obs_stats`` (``observation_statistics``' mean and
    standard deviation) stores every observation standardised by them."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        seeds: Sequence[int] = (0,),
        batch_size: int = 256,
        num_batches: int = 1,
        device: str = "cpu",
        part: tuple[int, int] = (0, 1),
        reader: str = "auto",
        counts_steps: bool = True,
        obs_stats: tuple[Any, Any] | None = None,
    ) -> None:
        info = read_info(path)
        index, parts = part
        strata = len(seeds)
        if not 0 <= index < parts:
            raise ValueError(f"part must be (index, parts) with 0 <= index < parts, got {part}")
        if strata < 1 or strata % parts:
            raise ConfigError(
                f"the dataset is sampled in {strata} strata (algo.sample_strata), which {parts} copies of its "
                "fragment cannot share equally: run a number of copies that divides it"
            )
        own = strata // parts
        if batch_size % own:
            raise ConfigError(
                f"a batch share of {batch_size} cannot be drawn equally from {own} strata: make algo.batch_size a "
                f"multiple of algo.sample_strata ({strata})"
            )
        if info.total_episodes < strata:
            raise DatasetError(
                f"{info.path}: {info.total_episodes} episodes cannot be cut into {strata} strata: record more "
                "episodes or lower algo.sample_strata"
            )
        bounds = [s * info.total_episodes // strata for s in range(strata + 1)]
        self.own_strata = range(index * own, (index + 1) * own)
        first, last = bounds[self.own_strata.start], bounds[self.own_strata.stop]
        episodes = read_episodes(info.path, range(first, last), reader=reader)
        steps = transitions(episodes, info.action_space)
        super().__init__(
            len(steps),
            observation_shape(info.dataset_id, info.observation_space),
            *action_layout(info.action_space),
            batch_size=batch_size,
            num_batches=num_batches,
            device=device,
            final_obs=True,
        )
        obs, next_obs = torch.as_tensor(steps.obs), torch.as_tensor(steps.next_obs)
        if obs_stats is not None:  # every observation standardised by the whole dataset's statistics
            mean, std = (torch.as_tensor(x, dtype=torch.float32) for x in obs_stats)
            obs, next_obs = (obs.float() - mean) / std, (next_obs.float() - mean) / std
        self.insert(obs, steps.actions, steps.rewards, next_obs, steps.terminations, steps.truncations)
        # each stratum's rows in this copy's storage, and its random stream
        sizes = [sum(e.steps for e in episodes[bounds[s] - first : bounds[s + 1] - first]) for s in self.own_strata]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self.rows = {s: (start, size) for s, start, size in zip(self.own_strata, starts, sizes)}
        self.generators = {s: torch.Generator(device=self.device).manual_seed(int(seeds[s])) for s in self.own_strata}
        self.info = info
        self.episodes = (first, last)
        self.per_stratum = batch_size // own
        self.steps_per_sample = batch_size * num_batches if counts_steps else 0

    @property
    def identity(self) -> dict[str, Any]:
        """Which dataset this copy reads: what a checkpoint must match."""
        info: DatasetInfo = self.info
        return {
            "dataset_id": info.dataset_id,
            "total_episodes": info.total_episodes,
            "total_steps": info.total_steps,
        }

    def sample(self) -> Batched:
        shape = (self.per_stratum, self.num_batches)
        parts = [
            torch.randint(size, shape, generator=self.generators[s], device=self.device) + start
            for s, (start, size) in self.rows.items()
        ]
        index = torch.cat(parts)
        return ReplayBatch(
            self.obs[index], self.actions[index], self.rewards[index], self.next_obs[index], self.terminated[index]
        )

    def state_dict(self) -> dict[str, Any]:
        streams = {str(s): g.get_state() for s, g in self.generators.items()}
        return {"strata": streams, "dataset": self.identity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_identity(state)
        self._load_streams([state])

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """Another number of copies: each holds its strata anew (read at construction) and takes
        their random streams from whichever old copy held them, so the run draws on as before."""
        for state in states:
            self._check_identity(state)
        self._load_streams(states)

    def _load_streams(self, states: Sequence[dict[str, Any]]) -> None:
        saved = {int(s): stream for state in states for s, stream in state.get("strata", {}).items()}
        missing = [s for s in self.own_strata if s not in saved]
        if missing:
            raise ValueError(f"the checkpoint has no random stream for the dataset's strata {missing}")
        for s in self.own_strata:
            load_generator_state(self.generators[s], saved[s])

    def _check_identity(self, state: dict[str, Any]) -> None:
        saved = state.get("dataset")
        if saved != self.identity:
            raise ValueError(
                f"the checkpoint trained on dataset {_named(saved)}, this run reads {_named(self.identity)} "
                f"from {self.info.path}"
            )


def observation_statistics(path: str | os.PathLike[str], eps: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """The mean and standard deviation (plus ``eps``, so that constant features divide by it) of
    the observations of every transition in dataset ``path``, per feature, as float32: what an
    offline learner standardises its inputs by (CORL's ``normalize``), the same in every copy."""
    count, total, squares = 0, 0.0, 0.0
    for episode in read_episodes(path):
        obs = episode.observations[:-1].reshape(episode.steps, -1).astype(np.float64)
        count, total, squares = count + len(obs), total + obs.sum(0), squares + np.square(obs).sum(0)
    mean = np.asarray(total) / count
    std = np.sqrt(np.maximum(np.asarray(squares) / count - mean**2, 0.0)) + eps
    return mean.astype(np.float32), std.astype(np.float32)


def _named(identity: Any) -> str:
    """A dataset's identity as one reads it: ``id (E episodes, S steps)``."""
    if not isinstance(identity, dict):
        return "none"
    episodes, steps = identity.get("total_episodes", 0), identity.get("total_steps", 0)
    return f"{identity.get('dataset_id')} ({episodes:,} episodes, {steps:,} steps)"


def check_dataset_env(info: DatasetInfo, env_id: str, observation_space: Any, action_space: Any) -> None:
    """A ``DatasetError`` unless the dataset's spaces are those of ``env_id``, whose episodes an
    offline learner is evaluated on."""
    if info.observation_space != observation_space or info.action_space != action_space:
        raise DatasetError(
            f"{info.path} holds {info.observation_space} observations and {info.action_space} actions; "
            f"{env_id} has {observation_space} and {action_space}: record the dataset on {env_id}"
        )
