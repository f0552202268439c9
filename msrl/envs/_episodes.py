"""Episode bookkeeping, written once for every array backend.

Every environment needs the same accounting around its physics: each
environment's running return and length (the length doubles as the elapsed-step
counter of the time limit), and the episodes that finished since ``metrics``
was last polled.  ``EpisodeTracker`` keeps both in the environment's own memory
(NumPy arrays or tensors on its device), through ``ArrayBackend`` operations,
so the NumPy, torch and kernel backends, and the gymnasium adapter, count
episodes the same way.  ``GroupEpisodes`` adds the per-group accounting of a
multi-agent batch, shared by ``MultiAgentEnv`` and the PettingZoo adapter.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from msrl.core import CheckpointError, ConfigError
from msrl.envs._arrays import Array, ArrayBackend, Rows

_STATE_KEYS = ("return_total", "return_start", "running_length", "gross_length", "finished_count")


class Episodes(Protocol):
    """What an environment's dynamics records a step into: an ``EpisodeTracker``, or a
    multi-agent batch's ``GroupEpisodes`` (whose ``record`` takes rewards per group)."""

    @property
    def lengths(self) -> Array:
        """The running episodes' lengths: the time limit's counter."""
        ...

    def record(self, reward: Any, rows: Rows) -> None: ...


class EpisodeTracker:
    """Running return and length per environment, and totals of the episodes that
    finished since the last ``metrics()``, without a reduction or a host copy per step.

    A step calls ``record(reward, rows)`` with the rows of the environments whose
    episode just ended (``ArrayBackend.finished_rows``).

    * Returns: each environment's rewards are summed into ``total``, which a
      finished episode does not reset; an episode's return is ``total`` at its
      end minus ``total`` at its start, which ``start`` remembers (``finish``
      copies ``total`` into ``start`` for the finished rows).  A metrics window
      begins with ``start = 0``, so the returns of the episodes finished in it
      add up to ``sum(start)``.
    * Lengths: the running length is the time limit's counter, so ``finish``
      zeroes it; every environment gains one step per step, so the finished
      episodes' lengths add up to ``gross - sum(running lengths)``, the gross
      total being those running at the window's start plus ``steps * num_envs``
      (a host count).

    So a step costs two vector additions, plus one copy and one fill over the
    finished rows; only ``metrics`` and ``state_dict`` reduce and copy to the
    host.  ``discard`` and ``adopt_running`` (running values changed outside a
    step) keep both identities.

    A step kernel can do all of that in its own launch instead (``record_by``,
    the kernel backends' default): it updates ``total``, ``start`` and the
    lengths as ``record`` would, and counts each environment's finished
    episodes in a per-environment array (kept with ``counts_per_env=True``)
    that ``metrics`` and ``state_dict`` fold into the count, so the step has no
    reduction and no atomic on one address.  The numbers are the same, bit for
    bit.

    Example::

        >>> import numpy as np
        >>> from msrl.envs import NumpyArrays
        >>> tracker = EpisodeTracker(NumpyArrays(), num_envs=2)
        >>> tracker.record(np.ones(2, np.float32), np.array([1]))
        >>> tracker.metrics()
        {'episode_return': 1.0, 'episode_length': 1.0, 'episodes': 1}
    """

    def __init__(self, arrays: ArrayBackend, num_envs: int, counts_per_env: bool = False) -> None:
        self.arrays = arrays
        self.num_envs = num_envs
        self._total = arrays.zeros((num_envs,), "float64")
        self._start = arrays.zeros((num_envs,), "float64")
        self.lengths = arrays.zeros((num_envs,), "int64")
        # the finished episodes a step kernel counts per environment (record_by)
        self._finished = arrays.zeros((num_envs,), "int64") if counts_per_env else None
        self._start_window(arrays.scalar(0, "int64"), arrays.scalar(0, "int64"))

    def _start_window(self, gross_length: Any, finished_count: Any) -> None:
        """Count lengths and episodes from now on (fresh backend scalars)."""
        self._length_base = gross_length  # the gross length is this plus steps * num_envs
        self._steps = 0  # a host int: counting steps costs no device op
        self._count = finished_count  # episodes counted on the device (masks)
        self._count_host = 0  # episodes counted on the host (indices)
        if self._finished is not None:
            self._finished[...] = 0  # and per environment, by a step kernel

    @property
    def returns(self) -> Array:
        """The running episodes' returns so far (a new array)."""
        return self._total - self._start

    # -- a step -------------------------------------------------------------------
    def record(self, reward: Array, rows: Rows) -> None:
        """One step of every environment: its reward, and the episodes at ``rows``
        (``ArrayBackend.finished_rows``) that ended with it."""
        self._total += reward
        self.lengths += 1
        self._steps += 1
        if rows is not None:
            self.finish(rows)

    def record_by(self, launch: Callable[[Array, Array, Array, Array], None]) -> None:
        """One step of every environment, recorded by ``launch(total, start, lengths,
        finished)``: a step kernel that does, per environment, what ``record`` does
        (``msrl/envs/msrl_episodes.cuh``) and adds the episode it finished, if
        any, to ``finished`` (int64, one count per environment), in the step's own
        launch.  Nothing here reads the device; the tracker must keep ``counts_per_env``."""
        finished = self._finished
        if finished is None:
            raise ConfigError("record_by needs an EpisodeTracker built with counts_per_env=True")
        launch(self._total, self._start, self.lengths, finished)
        self._steps += 1

    def finish(self, rows: Rows) -> None:
        """The episodes at ``rows`` ended (``record`` calls this)."""
        if self.arrays.sparse:
            self._count_host += len(rows)
        else:
            self._count += rows.sum()
        self.arrays.copy_rows(self._start, self._total, rows)
        self.arrays.fill_rows(self.lengths, rows, 0)

    # -- outside a step -----------------------------------------------------------
    def discard(self, mask: Array | None = None) -> None:
        """Forget the running episodes (all, or where ``mask``) without recording them:
        ``reset`` and ``set_state`` start new ones."""
        if mask is None:
            self._total[...] = self._start
            self._length_base -= self.lengths.sum()
            self.lengths[...] = 0
        else:
            self.arrays.copy_where(self._total, self._start, mask)
            self._length_base -= self.arrays.where(mask, self.lengths, 0).sum()
            self.arrays.fill_mask(self.lengths, mask, 0)

    def adopt_running(self, returns: Array, lengths: Array) -> None:
        """Add to the running episodes what happened outside ``record`` (a rollout kernel
        that kept its own counters), so it is not counted as finished."""
        self._total += returns
        self.lengths += lengths
        self._length_base += lengths.sum()

    def _gross_length(self) -> Any:
        return self._length_base + self._steps * self.num_envs

    def _device_count(self) -> Any:
        """The episodes counted on the device in this window (a backend scalar)."""
        return self._count if self._finished is None else self._count + self._finished.sum()

    def metrics(self) -> dict[str, float]:
        """Mean return and length of the episodes finished since the last call, and
        their number; ``{}`` when none finished."""
        total_return, total_length, count = self.arrays.host_floats(  # the one host copy
            self._start.sum(), self._gross_length() - self.lengths.sum(), self._device_count()
        )
        count += self._count_host
        self._total -= self._start  # the running episodes carry over into the next window
        self._start[...] = 0
        self._start_window(self.lengths.sum(), self.arrays.scalar(0, "int64"))
        if count == 0:
            return {}
        return {"episode_return": total_return / count, "episode_length": total_length / count, "episodes": int(count)}

    # -- checkpoints --------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``total`` and ``start`` as they are (not their difference), so that metrics
        after a resume equal those of the run that was not interrupted, to the last
        bit; the running lengths, the gross length and the finished count."""
        gross_length, count = self.arrays.host_floats(self._gross_length(), self._device_count())
        return {
            "return_total": self.arrays.to_tensor(self._total),
            "return_start": self.arrays.to_tensor(self._start),
            "running_length": self.arrays.to_tensor(self.lengths),
            "gross_length": int(gross_length),
            "finished_count": int(count) + self._count_host,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise CheckpointError(f"episode tracker state lacks {missing}; expected keys {list(_STATE_KEYS)}")
        for key in ("return_total", "return_start", "running_length"):
            if tuple(state[key].shape) != (self.num_envs,):
                raise CheckpointError(
                    f"episode tracker {key} has shape {tuple(state[key].shape)}, "
                    f"expected ({self.num_envs},) for {self.num_envs} envs"
                )
        self._total = self.arrays.convert(state["return_total"], "float64")
        self._start = self.arrays.convert(state["return_start"], "float64")
        self.lengths = self.arrays.convert(state["running_length"], "int64")
        self._start_window(
            self.arrays.scalar(int(state["gross_length"]), "int64"),
            self.arrays.scalar(int(state["finished_count"]), "int64"),
        )


class GroupEpisodes:
    """The episodes of a multi-agent batch: ``overall`` tracks each environment's mean
    reward over all its agents, ``groups[name]`` the mean over the group's agents.

    ``record`` takes the step's rewards as ``{group: (num_envs, n_group)}``; the finished
    rows are the environment's (every agent's episode ends with its environment's).
    ``metrics()`` gives ``overall``'s keys plus ``episode_return/<group>``.  A checkpoint
    keeps ``overall`` under ``"episodes"`` and the groups under ``"group_episodes"``.
    A step is recorded here by array operations after the step's launch, also on the
    multi-agent kernels (Tag): only single-agent kernels record theirs in the step
    kernel (``EpisodeTracker.record_by``).

    Example::

        >>> import numpy as np
        >>> from msrl.envs import NumpyArrays
        >>> episodes = GroupEpisodes(NumpyArrays(), num_envs=1, group_sizes={"a": 1, "b": 3})
        >>> episodes.record({"a": np.ones((1, 1), np.float32), "b": np.zeros((1, 3), np.float32)}, np.array([0]))
        >>> episodes.metrics()
        {'episode_return': 0.25, 'episode_length': 1.0, 'episodes': 1, 'episode_return/a': 1.0, 'episode_return/b': 0.0}
    """

    def __init__(
        self,
        arrays: ArrayBackend,
        num_envs: int,
        group_sizes: Mapping[str, int],
        overall: EpisodeTracker | None = None,
    ) -> None:
        self.overall = EpisodeTracker(arrays, num_envs) if overall is None else overall
        self.groups = {name: EpisodeTracker(arrays, num_envs) for name in group_sizes}
        self.group_sizes = dict(group_sizes)
        self.num_agents = sum(self.group_sizes.values())

    @property
    def lengths(self) -> Array:
        """The running episodes' lengths (the time limit's counter)."""
        return self.overall.lengths

    def record(self, rewards: Mapping[str, Array], rows: Rows) -> None:
        """One step: per group the mean of its agents' rewards, overall the mean of all."""
        sums = {name: reward.sum(1) for name, reward in rewards.items()}
        for name, group_sum in sums.items():
            self.groups[name].record(group_sum / self.group_sizes[name], rows)
        total = functools.reduce(operator.add, sums.values())  # ((a + b) + c): the groups' order
        self.overall.record(total / self.num_agents, rows)

    def discard(self, mask: Array | None = None) -> None:
        """Forget the running episodes (all, or where ``mask``), overall and in every group."""
        self.overall.discard(mask)
        for tracker in self.groups.values():
            tracker.discard(mask)

    def metrics(self) -> dict[str, float]:
        out = self.overall.metrics()
        for name, tracker in self.groups.items():
            group = tracker.metrics()
            if "episode_return" in group:
                out[f"episode_return/{name}"] = group["episode_return"]
        return out

    def group_state_dict(self) -> dict[str, Any]:
        """The groups' trackers, ``{group: EpisodeTracker.state_dict()}``."""
        return {name: tracker.state_dict() for name, tracker in self.groups.items()}

    def check_group_state(self, groups: Any, owner: str) -> None:
        """A ``CheckpointError`` naming ``owner`` unless ``groups`` holds every group's episodes."""
        if not isinstance(groups, dict) or set(groups) != set(self.groups):
            raise CheckpointError(f"{owner} checkpoint lacks the episodes of groups {sorted(self.groups)}")

    def load_group_state_dict(self, groups: Any, owner: str) -> None:
        self.check_group_state(groups, owner)
        for name, tracker in self.groups.items():
            tracker.load_state_dict(groups[name])


__all__ = ["EpisodeTracker", "Episodes", "GroupEpisodes"]
