"""PPO's minibatch step on a ``TwinMLP`` as plain tensor functions, for ``torch.compile``.

The fused eager path (``TwinMLP``'s autograd node, ``ppo_losses``' closed-form gradients, fused
Adam) already has no autograd graph to speak of; here the same arithmetic is written without
autograd at all: forward, closed-form loss gradients (the entropy bonus's included), the
network's backward, gradient clip and Adam, as one function of tensors.  ``torch.compile`` traces
it whole (no graph break, no host sync) and fuses it; the update equals the eager one to float
rounding (``tests/unit/test_compiled_learner.py``).

Minibatches are gathered inside the step from the whole batch and a ``[k, rows]`` block of row
indices (the same random order the eager path draws), ``k`` minibatches per call, so the shapes
never change between calls and the step compiles once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from msrl.rl._compiled import CompiledStep, adam_, adam_state, clip_grad_, keep_in_place
from msrl.rl._ppo_loss import _policy_loss, _value_loss
from msrl.rl._twin_mlp import _Layout

_Adam = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
_Data = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class PPOStepConfig:
    """The static part of a step: what ``torch.compile`` specialises on."""

    layout: _Layout
    clip_coef: float
    clip_vloss: bool
    norm_adv: bool
    vf_coef: float
    ent_coef: float
    max_grad_norm: float
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-5

    @classmethod
    def of(cls, config: Any, layout: _Layout) -> PPOStepConfig:
        """The step of a PPO config (any object with PPO's loss fields) on a network of ``layout``."""
        names = ("clip_coef", "clip_vloss", "norm_adv", "vf_coef", "ent_coef", "max_grad_norm")
        return cls(layout, **{name: getattr(config, name) for name in names})


def twin_forward(x: torch.Tensor, flat: torch.Tensor, layout: _Layout) -> tuple[torch.Tensor, ...]:
    """``TwinMLP``'s forward pass: logits, value and the two hidden activations its backward needs."""
    w1, b1, w2, b2, wp, bp, wv, bv = layout.split(flat)
    t1 = torch.tanh(torch.addmm(b1, x, w1))  # [B, 2H]: both towers
    towers = t1.view(x.shape[0], 2, layout.hidden).transpose(0, 1)  # [2, B, H]
    t2 = torch.tanh(torch.baddbmm(b2, towers, w2))
    return torch.addmm(bp, t2[0], wp), torch.addmm(bv, t2[1], wv).squeeze(-1), t1, t2


def twin_backward(
    x: torch.Tensor,
    flat: torch.Tensor,
    layout: _Layout,
    t1: torch.Tensor,
    t2: torch.Tensor,
    grad_logits: torch.Tensor,
    grad_value: torch.Tensor,
) -> torch.Tensor:
    """The gradient with respect to ``flat`` (one tensor in its layout) of a loss whose gradients
    with respect to the logits and values are given: ``TwinMLP``'s hand-written backward."""
    _, _, w2, _, wp, _, wv, _ = layout.split(flat)
    rows, h = x.shape[0], layout.hidden
    grad_value = grad_value.unsqueeze(-1)
    d2 = torch.stack([grad_logits @ wp.t(), grad_value @ wv.t()]) * (1 - t2 * t2)  # [2, B, H]
    towers = t1.view(rows, 2, h).transpose(0, 1)
    d1 = torch.bmm(d2, w2.transpose(1, 2)).transpose(0, 1).reshape(rows, 2 * h) * (1 - t1 * t1)
    pieces = (
        x.t() @ d1,
        d1.sum(0),
        torch.bmm(towers.transpose(1, 2), d2),
        d2.sum(1),
        t2[0].t() @ grad_logits,
        grad_logits.sum(0),
        t2[1].t() @ grad_value,
        grad_value.sum(0),
    )
    return torch.cat([p.reshape(-1) for p in pieces])


def ppo_twin_grad(
    flat: torch.Tensor,
    minibatch: tuple[torch.Tensor, ...],
    cfg: PPOStepConfig,
) -> torch.Tensor:
    """The gradient of ``policy_loss + vf_coef * value_loss - ent_coef * entropy`` on one minibatch
    ``(obs, actions, old_logprobs, old_values, advantages, returns)``."""
    obs, actions, old_logprobs, old_values, advantages, returns = minibatch
    logits, values, t1, t2 = twin_forward(obs, flat, cfg.layout)
    _, grad_logits = _policy_loss(logits, actions, old_logprobs, advantages, cfg.clip_coef, cfg.norm_adv, True)
    _, grad_values = _value_loss(values, old_values, returns, cfg.clip_coef, cfg.clip_vloss, True)
    assert grad_logits is not None and grad_values is not None
    if cfg.ent_coef:  # d(-c * mean H)/dz = c/n * p * (log p + H), H = -sum p log p
        log_p = torch.log_softmax(logits, dim=-1)
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1, keepdim=True)
        grad_logits = grad_logits + (cfg.ent_coef / logits.shape[0]) * p * (log_p + entropy)
    return twin_backward(obs, flat, cfg.layout, t1, t2, grad_logits, cfg.vf_coef * grad_values)


def apply_grad_(
    flat: torch.Tensor,
    grad: torch.Tensor,
    adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    lr: torch.Tensor,
    cfg: PPOStepConfig,
) -> None:
    """Clip ``grad`` to ``max_grad_norm`` and take an Adam step on ``flat`` in place."""
    adam_(flat, clip_grad_(grad, cfg.max_grad_norm), *adam, lr, cfg.betas, cfg.eps)


def ppo_twin_steps_(
    flat: torch.Tensor,
    adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    lr: torch.Tensor,
    data: tuple[torch.Tensor, ...],
    order: torch.Tensor,
    cfg: PPOStepConfig,
) -> None:
    """``order.shape[0]`` gradient steps in place, the i-th on the rows ``order[i]`` of ``data``."""
    for rows in order.unbind(0):  # unrolled at trace time: order's shape is static
        grad = ppo_twin_grad(flat, tuple(t[rows] for t in data), cfg)
        apply_grad_(flat, grad, adam, lr, cfg)


class CompiledPPOUpdate:
    """PPO's epochs of minibatch steps on a ``TwinMLP``, each step one compiled call.

    The row order is drawn as ``msrl.rl.ppo_epochs`` draws it (one ``randperm`` per epoch, same
    generator), so both paths see the same minibatches.  With gradients synchronised across
    learner copies, the step is two compiled regions with the all-reduce between them.
    """

    def __init__(self, cfg: PPOStepConfig, mode: str | None, backend: str = "inductor") -> None:
        self.cfg = cfg

        def steps(flat: torch.Tensor, adam: _Adam, lr: torch.Tensor, data: _Data, order: torch.Tensor) -> None:
            ppo_twin_steps_(flat, adam, lr, data, order, cfg)

        def grad(flat: torch.Tensor, data: _Data, rows: torch.Tensor) -> torch.Tensor:
            return ppo_twin_grad(flat, tuple(t[rows] for t in data), cfg)

        def apply(flat: torch.Tensor, grad: torch.Tensor, adam: _Adam, lr: torch.Tensor) -> None:
            apply_grad_(flat, grad, adam, lr, cfg)

        self.steps, self.grad, self.apply = (
            CompiledStep(fn, mode, backend, key=f"ppo_twin_{fn.__name__}:{cfg!r}") for fn in (steps, grad, apply)
        )

    @property
    def compile_seconds(self) -> float:
        return self.steps.compile_seconds + self.grad.compile_seconds + self.apply.compile_seconds

    def __call__(
        self,
        params: torch.nn.Parameter,
        optimizer: torch.optim.Optimizer,
        data: _Data,
        epochs: int,
        num_minibatches: int,
        generator: torch.Generator,
        sync_grads: Callable[[torch.Tensor], None] | None = None,
    ) -> None:
        """``epochs`` passes of ``num_minibatches`` steps on ``params`` (and ``optimizer``'s Adam
        state) in place; ``sync_grads(grad)`` averages a gradient over learner copies in place."""
        flat = params.detach()
        adam = adam_state(optimizer, params)
        keep_in_place(self.steps.mode, (flat, *adam))
        lr = torch.as_tensor(optimizer.param_groups[0]["lr"], dtype=flat.dtype, device=flat.device)
        rows = data[0].shape[0]
        for _ in range(epochs):
            order = torch.randperm(rows, generator=generator, device=generator.device)
            for block in order.view(num_minibatches, 1, rows // num_minibatches):
                if sync_grads is None:
                    self.steps(flat, adam, lr, data, block)
                else:
                    grad = self.grad(flat, data, block[0])
                    sync_grads(grad)
                    self.apply(flat, grad, adam, lr)
