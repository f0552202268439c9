"""Generalised advantage estimation (Schulman et al., 2016)."""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for a (T, N) rollout.

    ``dones[t]`` is 1 where the episode ended at step t; the observation after
    it belongs to a new episode (same-step autoreset), so nothing is
    bootstrapped across it.  ``last_value`` is V(obs after the last step).
    """
    steps = rewards.shape[0]
    advantages = torch.empty_like(rewards)
    next_advantage = torch.zeros_like(last_value)
    next_value = last_value
    for t in range(steps - 1, -1, -1):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        next_advantage = delta + gamma * gae_lambda * not_done * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values
