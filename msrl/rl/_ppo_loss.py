"""PPO's clipped surrogate and value losses as one autograd node.

With n rows, ratio r = exp(log pi(a|s) - log pi_old(a|s)) and advantages A (normalised per
minibatch when asked):

    policy_loss = mean(max(-A * r, -A * clamp(r, 1 - c, 1 + c)))
    value_loss  = 0.5 * mean(max((v - R)^2, (v_old + clamp(v - v_old, -c, c) - R)^2))   (clip_vloss)
                = 0.5 * mean((v - R)^2)                                               (otherwise)

Written as some thirty tensor expressions, autograd records about twenty nodes whose backward
costs three times their forward at minibatch sizes of a few hundred rows.  Here the forward pass
computes both losses and their gradients with respect to the logits and the value estimates in
closed form; the backward pass only scales them:

    d policy_loss / d logits = (onehot(a) - softmax(logits)) * r * (-A) * [unclipped term >= clipped term] / n
    d value_loss / d v       = ((v - R) if the unclipped term is larger,
                                else (v_clip - R) * [|v - v_old| <= c] if the clipped term is larger,
                                else the mean of the two on a tie) / n

The indicators are where autograd's ``maximum`` and ``clamp`` route the gradient, ties included
(``maximum`` passes half to each side). The policy terms tie exactly inside the clip range (the
clamp returns r itself) and both carry the same gradient there; outside it they tie only where
A = 0. The value terms differ inside the clip range by the rounding of v_old + (v - v_old), so the
value gradient follows both branches rather than trusting ``>=`` to pick one.
"""

from __future__ import annotations

import torch

from msrl.rl._gae import normalize_advantages


def _policy_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
    norm_adv: bool,
    with_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    rows = logits.shape[0]
    log_probs = torch.log_softmax(logits, dim=-1)
    index = actions.long().unsqueeze(-1)
    ratio = (log_probs.gather(-1, index).squeeze(-1) - old_logprobs).exp_()
    if norm_adv:
        advantages = normalize_advantages(advantages)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip, 1 + clip)
    loss = torch.maximum(unclipped, clipped).mean()
    if not with_grad:
        return loss, None
    # d loss / d log pi(a|s), per row; then through log_softmax: onehot(a) - softmax.
    coef = (unclipped >= clipped).to(ratio.dtype).mul_(ratio).mul_(advantages).mul_(-1.0 / rows).unsqueeze(-1)
    grad = log_probs.exp_().mul_(-coef)
    return loss, grad.scatter_add_(-1, index, coef)


def _value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip: float,
    clip_vloss: bool,
    with_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    rows = values.shape[0]
    error = values - returns
    squared = error * error
    if clip_vloss:
        clipped_error = old_values + (values - old_values).clamp(-clip, clip) - returns
        clipped_squared = clipped_error * clipped_error
        loss = 0.5 * torch.maximum(squared, clipped_squared).mean()
        grad = None
        if with_grad:
            # Both branches carry a gradient: the clipped one too, wherever the clamp passes v through
            # (|v - v_old| <= c). Inside the clip range the two errors differ by rounding alone, so the
            # branch max() picks must not decide whether the row gets a gradient at all.
            inside = (values - old_values).abs() <= clip
            grad_clipped = clipped_error * inside.to(error.dtype)
            grad = torch.where(
                squared > clipped_squared,
                error,
                torch.where(squared < clipped_squared, grad_clipped, 0.5 * (error + grad_clipped)),
            )
    else:
        loss = 0.5 * squared.mean()
        grad = error.clone() if with_grad else None
    return loss, (grad.div_(rows) if grad is not None else None)


class _PPOLossFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, logits, values, actions, old_logprobs, old_values, advantages, returns, clip, clip_vloss, norm_adv
    ):
        policy_loss, grad_logits = _policy_loss(logits, actions, old_logprobs, advantages, clip, norm_adv, True)
        value_loss, grad_values = _value_loss(values, old_values, returns, clip, clip_vloss, True)
        ctx.save_for_backward(grad_logits, grad_values)
        return policy_loss, value_loss

    @staticmethod
    def backward(ctx, grad_policy_loss, grad_value_loss):
        grad_logits, grad_values = ctx.saved_tensors
        return (grad_logits * grad_policy_loss, grad_values * grad_value_loss) + (None,) * 8


def ppo_losses(
    logits: torch.Tensor,
    values: torch.Tensor,
    actions: torch.Tensor,
    old_logprobs: torch.Tensor,
    old_values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    *,
    clip: float,
    clip_vloss: bool = True,
    norm_adv: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(policy_loss, value_loss)`` for a minibatch of a categorical policy; see the module docstring."""
    if torch.is_grad_enabled() and (logits.requires_grad or values.requires_grad):
        return _PPOLossFunction.apply(
            logits, values, actions, old_logprobs, old_values, advantages, returns, clip, clip_vloss, norm_adv
        )
    policy_loss, _ = _policy_loss(logits, actions, old_logprobs, advantages, clip, norm_adv, False)
    value_loss, _ = _value_loss(values, old_values, returns, clip, clip_vloss, False)
    return policy_loss, value_loss
