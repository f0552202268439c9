"""A replay of whole episodes, for learners that unroll a recurrent network over each (QMIX, VDN)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from msrl.core import Batched, Buffer, NoValue
from msrl.rl._replay import check_fits
from msrl.rl._state import load_generator_state


class EpisodeBatch(NamedTuple):
    """Sampled episodes, padded to ``T`` steps, ``num_batches`` batches of ``B`` side by side (row-major,
    as ``msrl.rl.ReplayBatch``: batch ``k`` is ``field[:, k]``): ``obs`` ``(B, K, T + 1, agents,
    obs_dim)`` (each step's observation and, after the last, the episode's last one), ``actions``
    ``(B, K, T, agents)``, ``rewards``, ``terminated`` and ``mask`` ``(B, K, T)``; ``mask`` is 1 on
    the episode's steps and 0 on the padding after them.  No rows while the replay holds fewer
    episodes than it starts from."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    mask: torch.Tensor

    @property
    def num_batches(self) -> int:
        return self.rewards.shape[1]

    def minibatch(self, k: int) -> EpisodeBatch:
        """The episodes of update ``k``."""
        return EpisodeBatch(*(field[:, k] for field in self))


class EpisodeReplay(Buffer):
    """The last ``capacity`` whole episodes of every environment, sampled uniformly by episode.

    ``insert`` takes one step of every environment of a multi-agent environment: per group
    ``obs`` ``(envs, agents, obs_dim)`` and ``actions`` ``(envs, agents)``, the rewards averaged
    over all agents (the team's reward), the step's last observations (``last``: the
    environment's ``final_obs()``, or the next observations) and the episodes' ends.  Agents of all
    groups (``groups``, in order) are one row of agents.  An episode enters the replay when it ends;
    one longer than ``max_length`` steps is an error.  With ``final_obs`` an episode cut by a time
    limit keeps its last observation in the slot after its last step and that step is not terminal,
    so its value bootstraps from the observation (EPyMARL's episodes on SMAC), where the observation is
    known (not NaN: fused kernels reset inside the step); otherwise, and without ``final_obs``,
    the end is terminal and the slot holds zeros (the MAPPO paper's code ends MPE's episodes so).
    ``sample()`` gives ``num_batches`` batches of ``batch_size`` episodes, or none before
    ``learning_starts`` episodes (at least a batch) are in."""

    def __init__(
        self,
        capacity: int,
        max_length: int,
        num_envs: int,
        groups: Sequence[str],
        agents: int,
        obs_dim: int,
        batch_size: int = 32,
        num_batches: int = 1,
        learning_starts: int = 0,
        seed: int = 0,
        device: str = "cpu",
        final_obs: bool = False,
    ) -> None:
        if min(capacity, max_length, num_envs, agents, obs_dim, batch_size) < 1:
            raise ValueError("capacity, max_length, num_envs, agents, obs_dim and batch_size must be >= 1")
        check_fits(capacity * (max_length + 1) * agents * obs_dim * 4, f"an episode replay of {capacity:,} episodes")
        self.capacity, self.max_length, self.batch_size, self.num_batches = (
            capacity,
            max_length,
            batch_size,
            num_batches,
        )
        self.groups = list(groups)
        self.final_obs = final_obs
        self.learning_starts = max(learning_starts, batch_size)
        self.device = torch.device(device)
        zeros = lambda *shape, dtype=torch.float32: torch.zeros(shape, dtype=dtype, device=self.device)  # noqa: E731
        T = max_length
        self.obs = zeros(capacity, T + 1, agents, obs_dim)
        self.actions = zeros(capacity, T, agents, dtype=torch.int64)
        self.rewards, self.terminated, self.mask = zeros(capacity, T), zeros(capacity, T), zeros(capacity, T)
        # the episodes in progress, one per environment
        self.open_obs = zeros(num_envs, T + 1, agents, obs_dim)
        self.open_actions = zeros(num_envs, T, agents, dtype=torch.int64)
        self.open_rewards, self.open_terminated = zeros(num_envs, T), zeros(num_envs, T)
        self.length = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.position = self.size = self.episodes = 0
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def _agents(self, values: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.cat([torch.as_tensor(values[g], dtype=dtype, device=self.device) for g in self.groups], dim=1)

    def insert(self, obs: Any, actions: Any, rewards: Any, last: Any, terminated: Any, truncated: Any) -> NoValue:
        obs, actions = self._agents(obs, torch.float32), self._agents(actions, torch.int64)
        team = torch.cat([torch.as_tensor(rewards[g], device=self.device) for g in self.groups], 1).float().mean(1)
        terminated = torch.as_tensor(terminated, dtype=torch.float32, device=self.device)
        ended = (terminated + torch.as_tensor(truncated, dtype=torch.float32, device=self.device)) > 0
        rows = torch.arange(obs.shape[0], device=self.device)
        t = self.length
        if int(t.max()) >= self.max_length:
            raise ValueError(f"an episode ran past algo.episode_length ({self.max_length} steps) without ending")
        self.open_obs[rows, t] = obs
        self.open_actions[rows, t] = actions
        self.open_rewards[rows, t] = team
        ends = ended
        if self.final_obs:  # a cut episode keeps its last observation where known (not NaN)
            last = self._agents(last, torch.float32)
            known = torch.isfinite(last.flatten(1)).all(1)
            ends = (terminated > 0) | (ended & ~known)
            cut = ended & ~ends
            self.open_obs[rows[cut], t[cut] + 1] = last[cut]
        self.open_terminated[rows, t] = ends.float()
        self.length += 1
        for env in ended.nonzero().flatten().tolist():
            self._store(env)

    def _store(self, env: int) -> None:
        n, row = int(self.length[env]), self.position
        self.obs[row] = 0.0
        self.obs[row, : n + 1] = self.open_obs[env, : n + 1]
        self.actions[row] = self.open_actions[env]
        self.rewards[row], self.terminated[row] = self.open_rewards[env], self.open_terminated[env]
        self.mask[row] = (torch.arange(self.max_length, device=self.device) < n).float()
        for store in (self.open_obs, self.open_rewards, self.open_terminated):
            store[env] = 0.0
        self.open_actions[env] = 0
        self.length[env] = 0
        self.position = (self.position + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.episodes += 1

    def __len__(self) -> int:
        return self.size

    def sample(self) -> Batched:
        rows = self.batch_size if self.episodes >= self.learning_starts else 0
        index = torch.randint(self.size or 1, (rows, self.num_batches), generator=self.generator, device=self.device)
        return EpisodeBatch(
            self.obs[index], self.actions[index], self.rewards[index], self.terminated[index], self.mask[index]
        )

    _STATE = ("obs", "actions", "rewards", "terminated", "mask")
    _OPEN = ("open_obs", "open_actions", "open_rewards", "open_terminated", "length")

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        state: dict[str, Any] = {name: getattr(self, name)[:n].clone() for name in self._STATE}
        state.update({name: getattr(self, name).clone() for name in self._OPEN})
        state.update(position=self.position, size=n, episodes=self.episodes, generator=self.generator.get_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint holds {n} episodes, more than this replay's capacity {self.capacity}")
        for name in self._STATE:
            getattr(self, name)[:n] = state[name].to(self.device)
        for name in self._OPEN:
            getattr(self, name).copy_(state[name].to(self.device))
        self.position, self.size, self.episodes = int(state["position"]), n, int(state["episodes"])
        load_generator_state(self.generator, state["generator"])
