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
    old_logprobs = categorical_log_prob(
        logits + 0.5 * torch.randn(rows, actions, generator=g, dtype=torch.float64), chosen
    )
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


def _value_rows(clip: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 rows built so that every branch of the clipped value loss is reached on purpose, on any
    CPU (elementwise IEEE arithmetic rounds the same whatever the vector width): ``(v, v_old, R,
    clipped term larger by rounding alone)``."""
    # Inside the clip range, v_old + (v - v_old) differs from v by rounding on most of these rows (v is
    # far smaller than v_old): the two terms are equal up to an ulp, and which one max() picks is an
    # accident of the arithmetic.
    v_in = torch.linspace(0.001, 0.01, 257, dtype=torch.float32)
    old_in = v_in + 0.1
    ret_in = torch.zeros_like(v_in)
    # Outside the range, the clipped term clearly larger (v moved towards R) or clearly smaller.
    v_out = torch.tensor([1.0, 2.0, -1.0, 0.5])
    old_out = torch.tensor([0.0, 0.0, 0.0, 3.0])
    ret_out = torch.tensor([1.0, 1.5, 4.0, -2.0])
    # Exact ties, in dyadic numbers every CPU computes exactly: inside the range (v_clip == v), and
    # outside it with R midway between v and v_clip (|v - R| == |v_clip - R|, one side has a gradient).
    v_tie = torch.tensor([0.75, 1.0, -1.0])
    old_tie = torch.tensor([0.5, 0.0, 0.0])
    ret_tie = torch.tensor([0.25, 0.625, -0.625])
    rounded = (old_in + (v_in - old_in) - ret_in) ** 2 - (v_in - ret_in) ** 2
    assert (rounded > 0).any() and (rounded < 0).any(), "the data must put rounding on both sides"
    values, old, ret = (
        torch.cat(parts) for parts in ((v_in, v_out, v_tie), (old_in, old_out, old_tie), (ret_in, ret_out, ret_tie))
    )
    return values, old, ret, torch.cat([rounded > 0, torch.zeros(7, dtype=torch.bool)])


def test_clipped_value_gradient_follows_both_branches_and_ties() -> None:
    """The fused value gradient equals autograd's on rows where the clipped and unclipped terms are
    equal up to rounding (it once dropped the gradient of such rows), on clearly clipped and clearly
    unclipped rows, and on exact ties, where autograd's maximum passes half to each side."""
    clip = 0.25
    values, old, ret, clipped_larger = _value_rows(clip)
    n = values.shape[0]
    logits = torch.zeros(n, 2)
    actions = torch.zeros(n, dtype=torch.long)
    old_logprobs = torch.full((n,), -0.6931472)
    advantages = torch.ones(n)

    ours = values.clone().requires_grad_()
    _, vl = ppo_losses(
        logits.requires_grad_(),
        ours,
        actions,
        old_logprobs,
        old,
        advantages,
        ret,
        clip=clip,
        clip_vloss=True,
        norm_adv=False,
    )
    vl.backward()
    ref = values.clone().requires_grad_()
    clipped = old + (ref - old).clamp(-clip, clip)
    (0.5 * torch.maximum((ref - ret) ** 2, (clipped - ret) ** 2).mean()).backward()
    torch.testing.assert_close(ours.grad, ref.grad, atol=1e-7, rtol=1e-5)
    # The ties reach the half-gradient case: the outside tie keeps half of (v - R), not all of it.
    tie_grad = ours.grad[-2:] * n
    torch.testing.assert_close(tie_grad, 0.5 * (values[-2:] - ret[-2:]))
    # Rows where rounding made the clipped term the larger still get about (v - R) / n, not zero.
    torch.testing.assert_close(ours.grad[clipped_larger] * n, (values - ret)[clipped_larger], atol=1e-6, rtol=1e-4)
