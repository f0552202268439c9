"""Global gradient-norm clipping with fewer kernels than torch's."""

from __future__ import annotations

from collections.abc import Iterable

import torch


def clip_grad_norm_(params: torch.Tensor | Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale the gradients of ``params`` (one tensor, or several) in place so that their global L2
    norm is at most ``max_norm``; return the norm before.

    The same rule as ``torch.nn.utils.clip_grad_norm_`` (coefficient ``max_norm / (norm + 1e-6)``,
    capped at 1) in a handful of kernels and no host sync: at the sizes of small RL networks on
    the CPU, torch's version spends most of its time grouping tensors by device and dtype (2x
    slower here for a 64-64 MLP).
    """
    if isinstance(params, torch.Tensor):
        grad = params.grad
        if grad is None:
            raise ValueError("clip_grad_norm_: the tensor has no gradient (call backward first)")
        norm = torch.linalg.vector_norm(grad)
        grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm
