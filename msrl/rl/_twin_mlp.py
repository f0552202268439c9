"""Policy and value MLPs evaluated as one network, for small actor-critic models on the CPU.

At PPO's sizes (a 4-64-64-2 policy and a 4-64-64-1 value net, minibatches of a few hundred rows)
a gradient step is dominated by per-operation overhead, not arithmetic: two ``nn.Sequential``
towers cost some forty autograd nodes, and torch's CPU ``tanh`` alone is eight times slower than
its ``sigmoid``.  ``TwinMLP`` computes the same function with fewer, larger operations:

* both towers' first layers are one matmul (their weights side by side), their second layers one
  batched matmul, and the backward pass is written out by hand in one autograd node;
* tanh is evaluated as ``2 * sigmoid(2x) - 1`` in place (equal to within float rounding);
* all parameters live in one flat tensor, so the optimizer, gradient clipping and the gradient
  all-reduce each touch a single tensor.

The initial weights are those of the two ``nn.Linear`` towers it replaces (orthogonal, same
generator order), so a seed gives the same network as before; only rounding differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from msrl.rl._heads import CategoricalHead


@dataclass(frozen=True)
class _Layout:
    """Where each weight lives in the flat parameter vector.  Tower 0 is the policy, tower 1 the value."""

    inputs: int
    hidden: int
    outputs: int

    @property
    def sizes(self) -> tuple[int, ...]:
        d, h, a = self.inputs, self.hidden, self.outputs
        #       w1 (both)  b1      w2 (both)  b2      policy head  bias  value head  bias
        return (d * 2 * h, 2 * h, 2 * h * h, 2 * h, h * a, a, h, 1)

    @property
    def numel(self) -> int:
        return sum(self.sizes)

    def split(self, flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Views of ``flat`` (parameters or their gradient) shaped for the matmuls."""
        d, h, a = self.inputs, self.hidden, self.outputs
        w1, b1, w2, b2, wp, bp, wv, bv = torch.split(flat, list(self.sizes))
        return (w1.view(d, 2 * h), b1, w2.view(2, h, h), b2.view(2, 1, h), wp.view(h, a), bp, wv.view(h, 1), bv)


def _tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) = 2*sigmoid(2x) - 1, overwriting ``x``: three cheap kernels instead of one slow one."""
    return torch.sigmoid(x.mul_(2), out=x).mul_(2).sub_(1)


def _forward(x: torch.Tensor, weights: tuple[torch.Tensor, ...], layout: _Layout) -> tuple[torch.Tensor, ...]:
    w1, b1, w2, b2, wp, bp, wv, bv = weights
    t1 = _tanh_(torch.addmm(b1, x, w1))  # [B, 2H]: both towers
    towers = t1.view(x.shape[0], 2, layout.hidden).transpose(0, 1)  # [2, B, H]
    t2 = _tanh_(torch.baddbmm(b2, towers, w2))  # [2, B, H]
    logits = torch.addmm(bp, t2[0], wp)
    value = torch.addmm(bv, t2[1], wv).squeeze(-1)
    return logits, value, t1, t2


class _TwinFunction(torch.autograd.Function):
    """The forward pass above with its backward written out: one autograd node per call."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, flat: torch.Tensor, weights: tuple[torch.Tensor, ...], layout: _Layout
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``flat`` is the parameter autograd differentiates; ``weights`` are views of it, split once."""
        logits, value, t1, t2 = _forward(x, weights, layout)
        ctx.save_for_backward(x, flat, t1, t2)
        ctx.weights, ctx.layout = weights, layout
        return logits, value

    @staticmethod
    def backward(ctx, grad_logits: torch.Tensor | None, grad_value: torch.Tensor | None):
        x, flat, t1, t2 = ctx.saved_tensors
        layout: _Layout = ctx.layout
        rows, h = x.shape[0], layout.hidden
        if grad_logits is None:
            grad_logits = torch.zeros(rows, layout.outputs, dtype=flat.dtype, device=flat.device)
        grad_value = (
            torch.zeros(rows, dtype=flat.dtype, device=flat.device) if grad_value is None else grad_value
        ).unsqueeze(-1)
        w1, _, w2, _, wp, _, wv, _ = ctx.weights
        grad = torch.empty_like(flat)
        g_w1, g_b1, g_w2, g_b2, g_wp, g_bp, g_wv, g_bv = layout.split(grad)
        # Heads.
        torch.mm(t2[0].t(), grad_logits, out=g_wp)
        torch.sum(grad_logits, 0, out=g_bp)
        torch.mm(t2[1].t(), grad_value, out=g_wv)
        torch.sum(grad_value, 0, out=g_bv)
        # Second hidden layers, through tanh' = 1 - tanh^2.
        d2 = torch.empty_like(t2)
        torch.mm(grad_logits, wp.t(), out=d2[0])
        torch.mm(grad_value, wv.t(), out=d2[1])
        d2.mul_(1 - t2 * t2)
        towers = t1.view(rows, 2, h).transpose(0, 1)
        torch.bmm(towers.transpose(1, 2), d2, out=g_w2)
        torch.sum(d2, 1, keepdim=True, out=g_b2)
        # First hidden layers.
        d1 = torch.bmm(d2, w2.transpose(1, 2)).transpose(0, 1).reshape(rows, 2 * h).mul_(1 - t1 * t1)
        torch.mm(x.t(), d1, out=g_w1)
        torch.sum(d1, 0, out=g_b1)
        grad_x = torch.mm(d1, w1.t()) if ctx.needs_input_grad[0] else None
        return grad_x, grad, None, None


def _orthogonal(out_features: int, in_features: int, gain: float, generator: torch.Generator) -> torch.Tensor:
    weight = torch.empty(out_features, in_features)
    nn.init.orthogonal_(weight, gain, generator=generator)
    return weight


class TwinMLP(nn.Module):
    """A policy MLP and a value MLP with the same input and two tanh hidden layers each.

    ``forward(x)`` returns ``(logits, value)``; ``params`` is the one parameter tensor.  Initialised
    as in the PPO paper's code: orthogonal weights with gain sqrt(2) in the hidden layers, 0.01 in
    the policy head and 1 in the value head, zero biases.
    """

    def __init__(self, inputs: int, outputs: int, hidden: int, generator: torch.Generator) -> None:
        super().__init__()
        self.layout = _Layout(inputs, hidden, outputs)
        flat = torch.zeros(self.layout.numel)
        w1, _, w2, _, wp, _, wv, _ = self.layout.split(flat)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # orthogonal_'s QR rounds differently with more threads: same seed, same weights
        try:
            # The order of draws is that of the value tower, then the policy tower, layer by layer.
            w1[:, hidden:] = _orthogonal(hidden, inputs, 2**0.5, generator).t()
            w2[1] = _orthogonal(hidden, hidden, 2**0.5, generator).t()
            wv[:] = _orthogonal(1, hidden, 1.0, generator).t()
            w1[:, :hidden] = _orthogonal(hidden, inputs, 2**0.5, generator).t()
            w2[0] = _orthogonal(hidden, hidden, 2**0.5, generator).t()
            wp[:] = _orthogonal(outputs, hidden, 0.01, generator).t()
        finally:
            torch.set_num_threads(threads)
        self.params = nn.Parameter(flat)
        self._weights: tuple[torch.Tensor, ...] = ()
        self._weights_of: tuple = ()

    head = CategoricalHead
    """Samples and scores the logits (as ``msrl.rl.ActorCritic.head`` does), so the two networks
    are interchangeable in ``msrl.rl.ActorCriticActor``."""

    def weights(self) -> tuple[torch.Tensor, ...]:
        """The weight and bias views, split once (splitting costs as much as a small matmul).  The
        optimizer and ``load_state_dict`` write into ``params`` in place, so the views stay
        current; moving or casting the module gives ``params`` new storage, and new views.  A
        tensor swapped in for ``params`` (``torch.func.functional_call``, which a compiled region
        traces) is split afresh."""
        if type(self.params) is not nn.Parameter:
            return self.layout.split(self.params)
        key = (self.params.data_ptr(), self.params.dtype, self.params.device)
        if key != self._weights_of:
            self._weights, self._weights_of = self.layout.split(self.params.detach()), key
        return self._weights

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.is_grad_enabled() and (self.params.requires_grad or x.requires_grad):
            return _TwinFunction.apply(x, self.params, self.weights(), self.layout)
        logits, value, _, _ = _forward(x, self.weights(), self.layout)
        return logits, value
