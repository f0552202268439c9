"""A rollout buffer component for on-policy algorithms (PPO, A2C)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from msrl.core import Batched, Buffer, NoValue
from msrl.rl._gae import gae
from msrl.rl._normalize import RewardScaler


class RolloutBatch(NamedTuple):
    """A drained rollout, flattened over (step, env); a flat tuple of tensors so
    it can cross fragments as-is."""

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


class RolloutBuffer(Buffer):
    """Holds ``num_steps`` steps of ``num_envs`` environments; ``drain`` computes
    advantages with GAE and returns the flattened batch, emptying the buffer.

    Termination and truncation both end the advantage recursion (the observation the environment
    returns after either is already the next episode's); a truncation's target still bootstraps,
    see ``gae``.

    With ``normalize_reward`` the stored rewards are divided by the running standard deviation of
    the discounted return (``msrl.rl.RewardScaler``), whose statistics are part of the buffer's
    checkpoint.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        device: str = "cpu",
        normalize_reward: bool = False,
    ) -> None:
        self.num_steps, self.num_envs = num_steps, num_envs
        self.gamma, self.gae_lambda = gamma, gae_lambda
        shape = (num_steps, num_envs)
        self.obs = torch.zeros(shape + tuple(obs_shape), device=device)
        self.actions = torch.zeros(shape + tuple(action_shape), dtype=action_dtype, device=device)
        self.logprobs = torch.zeros(shape, device=device)
        self.values = torch.zeros(shape, device=device)
        self.rewards = torch.zeros(shape, device=device)
        self.terminated = torch.zeros(shape, device=device)
        self.truncated = torch.zeros(shape, device=device)
        self.position = 0
        self.reward_scaler = RewardScaler(num_envs, gamma, device=device) if normalize_reward else None

    def insert(
        self, obs: Any, action: Any, logprob: Any, value: Any, reward: Any, terminated: Any, truncated: Any
    ) -> NoValue:
        t = self.position
        if t >= self.num_steps:
            raise RuntimeError(f"rollout buffer is full ({self.num_steps} steps); drain it first")
        self.obs[t] = torch.as_tensor(obs)
        self.actions[t] = torch.as_tensor(action)
        self.logprobs[t] = torch.as_tensor(logprob)
        self.values[t] = torch.as_tensor(value)
        if self.reward_scaler is None:
            self.rewards[t] = torch.as_tensor(reward)
        else:
            done = torch.maximum(torch.as_tensor(terminated), torch.as_tensor(truncated))
            self.rewards[t] = self.reward_scaler(reward, done)
        self.terminated[t] = torch.as_tensor(terminated)
        self.truncated[t] = torch.as_tensor(truncated)
        self.position = t + 1

    def drain(self, last_value: Any) -> Batched:
        if self.position != self.num_steps:
            raise RuntimeError(f"rollout buffer holds {self.position} of {self.num_steps} steps")
        self.position = 0
        advantages, returns = gae(
            self.rewards,
            self.values,
            self.terminated,
            self.truncated,
            torch.as_tensor(last_value),
            self.gamma,
            self.gae_lambda,
        )
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        return RolloutBatch(
            flat(self.obs).clone(),
            flat(self.actions).clone(),
            flat(self.logprobs).clone(),
            flat(self.values).clone(),
            flat(advantages),
            flat(returns),
        )

    def drain_trajectories(self, last_obs: Any) -> Batched:
        """The rollout as it was collected, for learners that compute their own targets from it
        (IMPALA's V-trace): nothing is estimated here."""
        if self.position != self.num_steps:
            raise RuntimeError(f"rollout buffer holds {self.position} of {self.num_steps} steps")
        self.position = 0
        env_major = lambda x: x.transpose(0, 1).clone()  # noqa: E731
        return TrajectoryBatch(
            env_major(self.obs),
            env_major(self.actions),
            env_major(self.logprobs),
            env_major(self.rewards),
            env_major(self.terminated),
            env_major(self.truncated),
            torch.as_tensor(last_obs, dtype=self.obs.dtype, device=self.obs.device).clone(),
        )

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
