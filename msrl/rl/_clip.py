"""Global gradient-norm clipping for one flat parameter tensor."""

from __future__ import annotations

import torch


def clip_grad_norm_(params: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale ``params.grad`` in place so its L2 norm is at most ``max_norm``; return the norm before.

    The same rule as ``torch.nn.utils.clip_grad_norm_`` (coefficient ``max_norm / (norm + 1e-6)``,
    capped at 1) in three kernels and no host sync, for models such as ``TwinMLP`` whose
    parameters are one tensor: torch's version spends most of its time grouping tensors.
    """
    norm = torch.linalg.vector_norm(params.grad)
    params.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm
