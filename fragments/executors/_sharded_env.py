"""A NumPy environment split into shards stepped concurrently by a thread pool.

NumPy releases the GIL inside its array loops, so shards of a large batch run
in parallel on the fragment's CPUs; for small batches the hand-off costs more
than it saves, which is why the cpu executor only shards large batches.
Each shard is its own environment seeded from the original seed, so a sharded
run is reproducible for a given shard count (but is not the same run as an
unsharded one: the reset draws come from different generators).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import msrl.envs
from msrl import Environment


class ShardedEnv(Environment):
    def __init__(self, env: Environment, shards: int, pool: ThreadPoolExecutor) -> None:
        spec = env.spec
        sizes = [env.num_envs // shards + (1 if i < env.num_envs % shards else 0) for i in range(shards)]
        self.shards = [
            msrl.envs.make(spec.env_id, size, seed=spec.seed + 7919 * i, backend=spec.backend, **spec.kwargs)
            for i, size in enumerate(sizes)
        ]
        self.bounds = np.cumsum([0] + sizes)
        self.pool = pool
        self.spec = spec
        self.num_envs = env.num_envs
        self.num_agents = env.num_agents
        self.observation_space = env.observation_space
        self.action_space = env.action_space

    def _each(self, method: str, *per_shard: list[Any]) -> list[Any]:
        futures = [self.pool.submit(getattr(shard, method), *(args[i] for args in per_shard)) for i, shard in enumerate(self.shards)]
        return [future.result() for future in futures]

    def reset(self, seed: int | None = None) -> np.ndarray:
        seeds = [None if seed is None else seed + 7919 * i for i in range(len(self.shards))]
        return np.concatenate(self._each("reset", seeds))

    def observe(self) -> np.ndarray:
        return np.concatenate([shard.observe() for shard in self.shards])

    def step(self, action: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        action = np.asarray(action)
        slices = [action[lo:hi] for lo, hi in zip(self.bounds[:-1], self.bounds[1:])]
        results = self._each("step", slices)
        return tuple(np.concatenate([result[i] for result in results]) for i in range(4))

    def metrics(self) -> dict[str, float]:
        parts = [m for m in (shard.metrics() for shard in self.shards) if m.get("episodes")]
        if not parts:
            return {}
        count = sum(m["episodes"] for m in parts)
        return {
            "episode_return": sum(m["episode_return"] * m["episodes"] for m in parts) / count,
            "episode_length": sum(m["episode_length"] * m["episodes"] for m in parts) / count,
            "episodes": count,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"shards": [shard.state_dict() for shard in self.shards]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state.get("shards", ())) != len(self.shards):
            raise ValueError(f"checkpoint has {len(state.get('shards', ()))} env shards, this executor uses {len(self.shards)}")
        for shard, shard_state in zip(self.shards, state["shards"]):
            shard.load_state_dict(shard_state)
