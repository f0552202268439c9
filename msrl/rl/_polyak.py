"""Polyak averaging of target networks (DQN's and SAC's target updates)."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def polyak_update_(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source``, parameter by parameter (``tau=1`` copies).
    Buffers (batch-norm statistics) are copied, as SB3 does."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    targets: list[torch.Tensor] = list(target.parameters())
    sources: list[torch.Tensor] = list(source.parameters())
    if len(targets) != len(sources) or any(t.shape != s.shape for t, s in zip(targets, sources)):
        raise ValueError("target and source networks differ in their parameters")
    if tau == 1.0:
        for t, s in zip(targets, sources):
            t.copy_(s)
    else:
        torch._foreach_lerp_(targets, sources, tau)
    for target_buffer, source_buffer in zip(target.buffers(), source.buffers()):
        target_buffer.copy_(source_buffer)
