"""The rollout buffer of the on-policy algorithms (PPO, A2C, IMPALA) and, with agent groups, of
their multi-agent forms (MAPPO, IPPO): one buffer, one GAE, whatever the number of agents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

from msrl.core import AgentGroup, Batched, Buffer, NoValue
from msrl.rl._gae import gae
from msrl.rl._normalize import RewardScaler
from msrl.rl._spaces import action_layout, observation_dtype, observation_shape


class RolloutBatch(NamedTuple):
    """A drained rollout, flattened over (step, env) rows; a flat tuple of tensors so it can cross
    fragments as-is.  One agent group's share has an agent axis after the rows: ``obs (rows,
    agents, obs_dim)``, the rest ``(rows, agents[, action_dim])``."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


class TrajectoryBatch(NamedTuple):
    """Drained rollouts as trajectories, environment-major ``(num_envs, num_steps, ...)`` so that the
    rollouts of several buffer copies concatenate along environments; ``last_obs`` is the
    observation after the last step (for the learner's bootstrap value)."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    last_obs: torch.Tensor


GROUP_SEPARATOR = "/"
"""Joins a group's name and a ``RolloutBatch`` field in a grouped batch's keys (``"taggers/obs"``)."""


def flat_groups(batches: Mapping[str, RolloutBatch]) -> dict[str, torch.Tensor]:
    """Per-group batches as one flat ``"group/field" -> tensor`` mapping, groups in order: the form
    in which a multi-agent rollout crosses fragments (values on cut edges hold no nested dicts)."""
    return {
        f"{group}{GROUP_SEPARATOR}{field}": tensor
        for group, batch in batches.items()
        for field, tensor in zip(RolloutBatch._fields, batch)
    }


def group_batches(flat: Mapping[str, torch.Tensor]) -> dict[str, RolloutBatch]:
    """The inverse of ``flat_groups``: ``{group: RolloutBatch}``, groups in the order they came."""
    fields: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in flat.items():
        group, _, field = key.rpartition(GROUP_SEPARATOR)
        fields.setdefault(group, {})[field] = tensor
    return {group: RolloutBatch(**named) for group, named in fields.items()}


class _Track:
    """What one group's agents (or the single agent) did at every step: ``(num_steps, num_envs,
    *agents, ...)`` tensors."""

    def __init__(
        self,
        lead: tuple[int, ...],
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: str | torch.device,
        obs_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.obs = torch.zeros(lead + tuple(obs_shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros(lead + tuple(action_shape), dtype=action_dtype, device=device)
        self.logprobs = torch.zeros(lead, device=device)
        self.values = torch.zeros(lead, device=device)
        self.rewards = torch.zeros(lead, device=device)

    def write(self, t: int, obs: Any, action: Any, logprob: Any, value: Any, reward: Any) -> None:
        self.obs[t] = torch.as_tensor(obs)
        self.actions[t] = torch.as_tensor(action)
        self.logprobs[t] = torch.as_tensor(logprob)
        self.values[t] = torch.as_tensor(value)
        self.rewards[t] = torch.as_tensor(reward)


class RolloutBuffer(Buffer):
    """Holds ``num_steps`` steps of ``num_envs`` environments; ``drain`` computes advantages with GAE
    and returns the batch flattened over (step, env) rows, emptying the buffer.

    Termination and truncation both end the advantage recursion (the observation the environment
    returns after either is already the next episode's); a truncation's target still bootstraps,
    see ``gae``.

    Single agent: ``obs_shape``, ``action_shape`` and ``action_dtype`` describe one environment's
    observation and action, and ``drain`` returns a ``RolloutBatch``.  With ``groups`` (a
    multi-agent environment's ``AgentGroup``s) every group has its agents and shapes instead, the
    values ``insert`` takes and ``drain``'s ``last_value`` are dicts by group, GAE runs per agent
    (an environment's termination or truncation ends every agent's episode), and ``drain`` returns
    the groups' batches as one flat mapping (``flat_groups``; ``group_batches`` reads it back).

    With ``normalize_reward`` (single agent) the stored rewards are divided by the running standard
    deviation of the discounted return (``msrl.rl.RewardScaler``), whose statistics are part of the
    buffer's checkpoint.

    ``obs_dtype`` (``msrl.rl.observation_dtype`` of the space): uint8 frames are kept as uint8.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...] = (),
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        device: str = "cpu",
        normalize_reward: bool = False,
        groups: Mapping[str, AgentGroup] | None = None,
        obs_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.num_steps, self.num_envs = num_steps, num_envs
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.grouped = groups is not None
        if groups is None:
            self.tracks = {"": _Track((num_steps, num_envs), obs_shape, action_shape, action_dtype, device, obs_dtype)}
        else:
            if normalize_reward:
                raise ValueError("normalize_reward is for single-agent rollouts")
            self.tracks = {
                name: _Track(
                    (num_steps, num_envs, group.num_agents),
                    observation_shape(f"group {name!r}", group.observation_space),
                    *action_layout(group.action_space),
                    device,
                    observation_dtype(group.observation_space),
                )
                for name, group in groups.items()
            }
        self.terminated = torch.zeros((num_steps, num_envs), device=device)
        self.truncated = torch.zeros((num_steps, num_envs), device=device)
        self.position = 0
        self.reward_scaler = RewardScaler(num_envs, gamma, device=device) if normalize_reward else None

    def insert(
        self, obs: Any, action: Any, logprob: Any, value: Any, reward: Any, terminated: Any, truncated: Any
    ) -> NoValue:
        t = self.position
        if t >= self.num_steps:
            raise RuntimeError(f"rollout buffer is full ({self.num_steps} steps); drain it first")
        if self.grouped:
            for name, track in self.tracks.items():
                track.write(t, obs[name], action[name], logprob[name], value[name], reward[name])
        else:
            if self.reward_scaler is not None:
                reward = self.reward_scaler(
                    reward, torch.maximum(torch.as_tensor(terminated), torch.as_tensor(truncated))
                )
            self.tracks[""].write(t, obs, action, logprob, value, reward)
        self.terminated[t] = torch.as_tensor(terminated)
        self.truncated[t] = torch.as_tensor(truncated)
        self.position = t + 1

    def drain(self, last_value: Any) -> Batched:
        self._empty()
        if not self.grouped:
            return self._advantages(self.tracks[""], last_value)
        return flat_groups({name: self._advantages(track, last_value[name]) for name, track in self.tracks.items()})

    def _advantages(self, track: _Track, last_value: Any) -> RolloutBatch:
        terminated, truncated = self.terminated, self.truncated
        agents = track.rewards.dim() - 2
        if agents:  # per environment -> per agent
            terminated, truncated = (
                flag.reshape(flag.shape + (1,) * agents).expand_as(track.rewards) for flag in (terminated, truncated)
            )
        advantages, returns = gae(
            track.rewards,
            track.values,
            terminated,
            truncated,
            torch.as_tensor(last_value),
            self.gamma,
            self.gae_lambda,
        )
        rows = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731 - (step, env) -> rows
        return RolloutBatch(
            rows(track.obs).clone(),
            rows(track.actions).clone(),
            rows(track.logprobs).clone(),
            rows(track.values).clone(),
            rows(advantages),
            rows(returns),
        )

    def drain_trajectories(self, last_obs: Any) -> Batched:
        """The rollout as it was collected, for learners that compute their own targets from it
        (IMPALA's V-trace): nothing is estimated here.  Single agent only."""
        if self.grouped:
            raise ValueError("drain_trajectories is for single-agent rollouts")
        self._empty()
        track = self.tracks[""]
        env_major = lambda x: x.transpose(0, 1).clone()  # noqa: E731
        return TrajectoryBatch(
            env_major(track.obs),
            env_major(track.actions),
            env_major(track.logprobs),
            env_major(track.rewards),
            env_major(self.terminated),
            env_major(self.truncated),
            torch.as_tensor(last_obs, dtype=track.obs.dtype, device=track.obs.device).clone(),
        )

    def _empty(self) -> None:
        """Checks the buffer is full and empties it, for a drain."""
        if self.position != self.num_steps:
            raise RuntimeError(f"rollout buffer holds {self.position} of {self.num_steps} steps")
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        # Checkpoints are taken between iterations, when the buffer is empty.
        state: dict[str, Any] = {"position": self.position}
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state.get("position", 0))
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """Empty, as between iterations; the reward scale goes on from the statistics of every
        replica the checkpoint holds, folded together (the environments start new episodes, so
        the returns being accumulated restart at zero)."""
        if self.reward_scaler is not None:
            for state in states:
                self.reward_scaler.stats.fold_in(state["reward_scaler"]["stats"])
