"""Generalised advantage estimation (Schulman et al., 2016), with time-limit truncation bootstrapped."""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for a (T, N) rollout.

    ``terminated[t]`` / ``truncated[t]`` are 1 where the episode ended at step t by reaching a
    terminal state / by hitting a time limit.  The observation after either belongs to a new
    episode (same-step autoreset), so the advantage recursion stops there.  What differs is the
    one-step target: a terminal state is worth 0, but a time limit says nothing about the state,
    so the target bootstraps from the value of the state it cut off.  That observation is gone
    (replaced by the reset), and V(s_t) stands in for V(s_t+1).  Treating time limits as
    terminal instead teaches the value function a "death" at step 500 that it cannot see coming,
    and on CartPole it makes a solved policy collapse late in training.

    ``last_value`` is V(obs after the last step).
    """
    next_values = torch.cat((values[1:], last_value.unsqueeze(0)))
    next_values = torch.where(truncated > 0, values, next_values)
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    carry = gamma * gae_lambda * (1.0 - torch.maximum(terminated, truncated))
    advantages = torch.empty_like(rewards)
    advantage = deltas[-1]
    advantages[-1] = advantage
    for t in range(rewards.shape[0] - 2, -1, -1):
        advantage = torch.addcmul(deltas[t], carry[t], advantage)
        advantages[t] = advantage
    return advantages, advantages + values


def normalize_advantages(advantages: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Advantages shifted to mean 0 and scaled to std 1, as PPO and A2C normalise each minibatch.

    A minibatch of one sample is returned as it is (Stable-Baselines3's rule): the std of one value
    is NaN, and dividing by it made every weight NaN after the first update.
    """
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + eps)
