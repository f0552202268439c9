"""Value normalisation: the critic learns value targets standardised by running statistics, and
its outputs are mapped back before they enter GAE (the MAPPO paper's ``ValueNorm``, Yu et al.
2022, section 4 and appendix; PopArt's statistics without PopArt's output-preserving rescale).

The statistics are exponential moving averages of the targets' mean and mean square with weight
``beta`` per batch, debiased as Adam debiases its moments: after ``k`` batches the estimate is the
weighted average ``sum_i w_i m_i / sum_i w_i`` with ``w_i = (1 - beta) beta^(k - i)``, so the first
batch is not shrunk towards the zero start.  With the paper's ``beta = 0.99999`` that is, over any
run of fewer than ~10^5 updates, close to the plain average of every batch seen.

``ValueNorm`` is an ``nn.Module`` whose statistics are float64 *buffers*: a network that holds one
carries them in its ``state_dict``, so they reach actors with the weights (``copy_weights``), go into
checkpoints with the network, and are never touched by an optimiser.  Learner copies agree on them
by averaging each batch's sums over copies (``batch_sums`` -> ``Learner.sync_mean`` ->
``update_from_sums``), as PPO's observation statistics do.
"""

from __future__ import annotations

import torch
from torch import nn


class ValueNorm(nn.Module):
    """Debiased running mean and variance of value targets, with ``normalize``/``denormalize``.

    ``mean = running_mean / debias`` and ``var = max(running_mean_sq / debias - mean^2, var_floor)``
    with ``debias = max(debiasing_term, epsilon)``; before any update that is mean 0, variance
    ``var_floor``.  ``normalize(x) = (x - mean) / sqrt(var)``, ``denormalize`` its inverse.
    """

    running_mean: torch.Tensor
    running_mean_sq: torch.Tensor
    debiasing_term: torch.Tensor

    def __init__(self, beta: float = 0.99999, epsilon: float = 1e-5, var_floor: float = 1e-2) -> None:
        super().__init__()
        if not 0.0 < beta < 1.0:
            raise ValueError(f"ValueNorm beta must lie in (0, 1), got {beta!r}")
        if epsilon <= 0.0 or var_floor <= 0.0:
            raise ValueError(f"ValueNorm epsilon and var_floor must be > 0, got {epsilon!r} and {var_floor!r}")
        self.beta, self.epsilon, self.var_floor = float(beta), float(epsilon), float(var_floor)
        for name in ("running_mean", "running_mean_sq", "debiasing_term"):
            self.register_buffer(name, torch.zeros((), dtype=torch.float64))

    def batch_sums(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """``[sum w, sum w x, sum w x^2]`` of a batch (float64; ``w`` 1 without ``weights``, else the
        0/1 mask of the samples that count).  Sums add up across the parts of a batch, so learner
        copies average theirs and fold in the moments of the whole batch."""
        x = x.detach().to(self.running_mean.device, torch.float64)
        w = torch.ones_like(x) if weights is None else weights.detach().to(x.device, torch.float64).expand_as(x)
        return torch.stack([w.sum(), (w * x).sum(), (w * x.square()).sum()])

    @torch.no_grad()
    def update_from_sums(self, sums: torch.Tensor) -> None:
        """Fold in the batch whose ``batch_sums`` (or their average over copies) are ``sums``; a
        batch with no weight changes nothing.  No host sync: the empty case is a ``where``."""
        sums = sums.to(self.running_mean.device, torch.float64)
        count = sums[0]
        has = count > 0
        safe = torch.where(has, count, torch.ones_like(count))
        keep = torch.where(has, torch.full_like(count, self.beta), torch.ones_like(count))
        self.running_mean.mul_(keep).add_((1.0 - keep) * sums[1] / safe)
        self.running_mean_sq.mul_(keep).add_((1.0 - keep) * sums[2] / safe)
        self.debiasing_term.mul_(keep).add_(1.0 - keep)

    def update(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> None:
        """Fold in one batch of targets (the samples where ``weights`` is 1, or all)."""
        self.update_from_sums(self.batch_sums(x, weights))

    def mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The debiased mean and variance (float64 scalars)."""
        debias = self.debiasing_term.clamp(min=self.epsilon)
        mean = self.running_mean / debias
        var = (self.running_mean_sq / debias - mean.square()).clamp(min=self.var_floor)
        return mean, var

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.mean_var()
        return ((x.to(torch.float64) - mean) / var.sqrt()).to(x.dtype)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.mean_var()
        return (x.to(torch.float64) * var.sqrt() + mean).to(x.dtype)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, epsilon={self.epsilon}, var_floor={self.var_floor}"
