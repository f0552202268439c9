"""A host environment split into shards stepped concurrently by a thread pool.

NumPy releases the GIL inside its array loops, so shards of a large batch run
in parallel on the fragment's CPUs; for small batches the hand-off costs more
than it saves, which is why ``msrl.envs.make`` only shards batches of at least
``MIN_ENVS_PER_SHARD`` environments per thread, and only when the executor
offers threads.  Each shard is its own environment seeded from the original
seed, so a sharded run is reproducible for a given shard count (but is not the
same run as an unsharded one: the reset draws come from different generators).
Multi-agent environments shard the same way: their per-group dicts are split
and joined group by group along the environment axis.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from msrl.core import Environment

SHARD_SEED_STRIDE = 7919
"""Shard ``i`` is seeded ``seed + SHARD_SEED_STRIDE * i``."""


class ShardedEnv(Environment):
    """``num_envs`` environments as ``shards`` environments of near-equal size, made by
    ``make_shard(num_envs, seed)`` and stepped on a pool of ``shards`` threads."""

    def __init__(self, make_shard: Callable[[int, int], Environment], num_envs: int, seed: int, shards: int) -> None:
        sizes = [num_envs // shards + (1 if i < num_envs % shards else 0) for i in range(shards)]
        self.shards = [make_shard(size, seed + SHARD_SEED_STRIDE * i) for i, size in enumerate(sizes)]
        self.bounds = np.cumsum([0] + sizes)
        self.pool = ThreadPoolExecutor(shards, thread_name_prefix="msrl-env-shard")
        first = self.shards[0]
        self.num_envs = num_envs
        self.num_agents = getattr(first, "num_agents", 1)
        self.groups = getattr(first, "groups", None)
        self.observation_space = first.observation_space
        self.action_space = first.action_space

    def _each(self, method: str, *per_shard: list[Any]) -> list[Any]:
        futures = [
            self.pool.submit(getattr(shard, method), *(args[i] for args in per_shard))
            for i, shard in enumerate(self.shards)
        ]
        return [future.result() for future in futures]

    def reset(self, seed: int | None = None) -> Any:
        seeds = [None if seed is None else seed + SHARD_SEED_STRIDE * i for i in range(len(self.shards))]
        return _join(self._each("reset", seeds))

    def observe(self) -> Any:
        return _join([shard.observe() for shard in self.shards])

    def step(self, action: Any) -> tuple[Any, Any, Any, Any]:
        slices = [_rows(action, lo, hi) for lo, hi in zip(self.bounds[:-1], self.bounds[1:])]
        results = self._each("step", slices)
        return tuple(_join([result[i] for result in results]) for i in range(4))

    def final_obs(self) -> Any:
        """The shards' ``final_obs()`` joined (``BatchedEnv.final_obs``)."""
        return _join([getattr(shard, "final_obs")() for shard in self.shards])  # noqa: B009 - not in Environment

    def active(self) -> Any:
        """The shards' ``active()`` joined (see ``algorithms.mappo``'s active masks); every agent
        in the game when the shards' environment has no such method."""
        if callable(getattr(self.shards[0], "active", None)):
            return _join([getattr(shard, "active")() for shard in self.shards])  # noqa: B009 - optional method
        groups = self.groups or {}
        return {name: np.ones((self.num_envs, g.num_agents), np.float32) for name, g in groups.items()}

    def metrics(self) -> dict[str, float]:
        """The shards' episode means weighted by their episode counts (every ``episode_*`` key,
        the per-group returns of a multi-agent environment included)."""
        parts = [m for m in (shard.metrics() for shard in self.shards) if m.get("episodes")]
        if not parts:
            return {}
        count = sum(m["episodes"] for m in parts)
        means = {
            key: sum(m[key] * m["episodes"] for m in parts) / count
            for key in parts[0]
            if key != "episodes" and all(key in m for m in parts)
        }
        return {**means, "episodes": count}

    def state_dict(self) -> dict[str, Any]:
        return {"shards": [shard.state_dict() for shard in self.shards]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state.get("shards", ())) != len(self.shards):
            raise ValueError(
                f"checkpoint has {len(state.get('shards', ()))} env shards, this executor uses {len(self.shards)}"
            )
        for shard, shard_state in zip(self.shards, state["shards"]):
            shard.load_state_dict(shard_state)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for shard in self.shards:
            shard.close()


def _rows(value: Any, lo: int, hi: int) -> Any:
    """Environments ``lo:hi`` of a batch, or of each group's batch in a dict."""
    if isinstance(value, dict):
        return {key: np.asarray(item)[lo:hi] for key, item in value.items()}
    return np.asarray(value)[lo:hi]


def _join(parts: list[Any]) -> Any:
    """The shards' batches concatenated along environments (group by group for dicts)."""
    if isinstance(parts[0], dict):
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
    return np.concatenate(parts)
