"""A recorded dataset as the replay an offline learner samples: the buffer component that takes an
environment's place in a training loop with no environment in it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from msrl.core import DatasetError, load_generator_state
from msrl.data._minari import DatasetInfo, read_episodes, read_info, transitions
from msrl.rl import ReplayBuffer, action_layout, observation_shape


class DatasetReplay(ReplayBuffer):
    """The episodes of a dataset (``msrl record``'s, or Minari's), sampled uniformly with
    replacement: ``sample()`` gives ``num_batches`` batches of ``batch_size`` transitions, a
    ``ReplayBatch`` as the replay of an online run does.  Transitions cut by a time limit keep their
    episode's last observation and bootstrap (``terminated`` 0).

    Copy ``index`` of ``parts`` (``part``: ``RunInfo.part``) holds the episodes from
    ``index * E // parts`` to ``(index + 1) * E // parts`` of the dataset's ``E``: copies of the
    fragment shard the dataset, each sampling its share of the run's batch from its own episodes.

    Each ``sample`` call counts as ``steps_per_sample`` steps of the run (its rows): an offline
    run's budget, ``total_env_steps``, is the transitions its learner trains on.  A checkpoint
    holds the sampling stream and which dataset it was, not the data: a run resumes on the same
    dataset or stops with one line."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        batch_size: int = 256,
        num_batches: int = 1,
        seed: int = 0,
        device: str = "cpu",
        part: tuple[int, int] = (0, 1),
        reader: str = "auto",
    ) -> None:
        info = read_info(path)
        index, parts = part
        if not 0 <= index < parts:
            raise ValueError(f"part must be (index, parts) with 0 <= index < parts, got {part}")
        if info.total_episodes < parts:
            raise DatasetError(
                f"{info.path}: {info.total_episodes} episodes cannot be shared by {parts} copies of the dataset's "
                "fragment: record more episodes or run fewer copies"
            )
        first, last = index * info.total_episodes // parts, (index + 1) * info.total_episodes // parts
        episodes = read_episodes(info.path, range(first, last), reader=reader)
        steps = transitions(episodes, info.action_space)
        obs_shape = observation_shape(info.dataset_id, info.observation_space)
        super().__init__(
            len(steps),
            obs_shape,
            *action_layout(info.action_space),
            batch_size=batch_size,
            num_batches=num_batches,
            seed=seed,
            device=device,
            final_obs=True,
        )
        self.insert(steps.obs, steps.actions, steps.rewards, steps.next_obs, steps.terminations, steps.truncations)
        self.info = info
        self.episodes = (first, last)
        self.steps_per_sample = batch_size * num_batches

    @property
    def identity(self) -> dict[str, Any]:
        """Which dataset and which of its episodes this copy holds: what a checkpoint must match."""
        info: DatasetInfo = self.info
        return {
            "dataset_id": info.dataset_id,
            "total_episodes": info.total_episodes,
            "total_steps": info.total_steps,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "dataset": self.identity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_identity(state)
        load_generator_state(self.generator, state["generator"])

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """Another number of copies: each holds its new share of the episodes (read at
        construction); a copy that existed before keeps its sampling stream."""
        for state in states:
            self._check_identity(state)
        if replica < len(states):
            load_generator_state(self.generator, states[replica]["generator"])

    def _check_identity(self, state: dict[str, Any]) -> None:
        saved = state.get("dataset")
        if saved != self.identity:
            raise ValueError(
                f"the checkpoint trained on dataset {_named(saved)}, this run reads {_named(self.identity)} "
                f"from {self.info.path}"
            )


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
