"""Categorical sampling without torch.distributions' per-call overhead, which
dominates inference for the small batches of a rollout step."""

from __future__ import annotations

import torch


def sample_categorical(
    logits: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one action per row (Gumbel-max) and return ``(action, log_prob)``."""
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_(min=1e-20)))
    action = torch.argmax(logits + gumbel, dim=-1)
    return action, categorical_log_prob(logits, action)


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, dim=-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)
