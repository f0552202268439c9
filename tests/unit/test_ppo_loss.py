"""ppo_losses gives PPO's losses and the gradients autograd computes through the textbook formulas."""

from __future__ import annotations

import pytest
import torch

from msrl.rl import categorical_log_prob, ppo_losses

CLIP = 0.2


def _reference(logits, values, actions, old_logprobs, old_values, advantages, returns, clip_vloss, norm_adv):
    """PPO's losses as CleanRL writes them, differentiated by autograd."""
    ratio = (categorical_log_prob(logits, actions) - old_logprobs).exp()
    if norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
    if clip_vloss:
        clipped = old_values + (values - old_values).clamp(-CLIP, CLIP)
        v_loss = 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((values - returns) ** 2).mean()
    return pg_loss, v_loss


def _minibatch(seed: int, rows: int = 64, actions: int = 3):
    """Logits far enough from the old policy that many ratios fall outside the clip range."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, actions, generator=g, dtype=torch.float64)
    chosen = torch.randint(0, actions, (rows,), generator=g)
    old_logprobs = categorical_log_prob(logits + 0.5 * torch.randn(rows, actions, generator=g, dtype=torch.float64), chosen)
    values = torch.randn(rows, generator=g, dtype=torch.float64)
    old_values = values + 0.4 * torch.randn(rows, generator=g, dtype=torch.float64)
    advantages = torch.randn(rows, generator=g, dtype=torch.float64)
    returns = torch.randn(rows, generator=g, dtype=torch.float64)
    return logits, values, chosen, old_logprobs, old_values, advantages, returns


@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_losses_and_gradients_equal_autograd_on_the_formulas(clip_vloss: bool, norm_adv: bool, seed: int) -> None:
    logits, values, *rest = _minibatch(seed)
    ratio = (categorical_log_prob(logits, rest[0]) - rest[1]).exp()
    assert ((ratio < 1 - CLIP) | (ratio > 1 + CLIP)).any() and ((ratio > 1 - CLIP) & (ratio < 1 + CLIP)).any()
    ours_logits, ours_values = logits.clone().requires_grad_(), values.clone().requires_grad_()
    ref_logits, ref_values = logits.clone().requires_grad_(), values.clone().requires_grad_()

    pg, vl = ppo_losses(ours_logits, ours_values, *rest, clip=CLIP, clip_vloss=clip_vloss, norm_adv=norm_adv)
    ref_pg, ref_vl = _reference(ref_logits, ref_values, *rest, clip_vloss, norm_adv)
    torch.testing.assert_close(pg, ref_pg)
    torch.testing.assert_close(vl, ref_vl)

    # Unequal weights on the two losses, as in loss = pg + vf_coef * v.
    (pg + 0.7 * vl).backward()
    (ref_pg + 0.7 * ref_vl).backward()
    torch.testing.assert_close(ours_logits.grad, ref_logits.grad)
    torch.testing.assert_close(ours_values.grad, ref_values.grad)
    assert ours_logits.grad.abs().sum() > 0 and ours_values.grad.abs().sum() > 0


def test_without_grad_it_returns_the_same_losses_and_builds_no_graph() -> None:
    batch = _minibatch(3)
    with_grad = ppo_losses(batch[0].clone().requires_grad_(), batch[1].clone().requires_grad_(), *batch[2:], clip=CLIP)
    with torch.no_grad():
        without = ppo_losses(*batch, clip=CLIP)
    assert without[0].grad_fn is None
    torch.testing.assert_close(without, tuple(loss.detach() for loss in with_grad))


def test_entropy_bonus_gradient_adds_to_the_loss_gradient() -> None:
    """Logits feed both ppo_losses and an autograd entropy term; autograd must sum both paths."""
    logits, values, *rest = _minibatch(4)
    ours, ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    entropy = lambda x: -(torch.log_softmax(x, -1).exp() * torch.log_softmax(x, -1)).sum(-1).mean()  # noqa: E731
    pg, _ = ppo_losses(ours, values, *rest, clip=CLIP)
    (pg - 0.01 * entropy(ours)).backward()
    ref_pg, _ = _reference(ref, values, *rest, True, True)
    (ref_pg - 0.01 * entropy(ref)).backward()
    torch.testing.assert_close(ours.grad, ref.grad)
