"""The pieces of PPO's update that PPO, IMPALA and MAPPO share (``clipped_surrogate``,
``ppo_epochs``, ``linear_lr``), against their definitions and against the loops the algorithms
wrote out before they shared them (same generator, same minibatches)."""

from __future__ import annotations

import math

import pytest
import torch

from msrl.rl import RolloutBatch, clipped_surrogate, linear_lr, ppo_epochs


def test_clipped_surrogate_matches_the_paper_row_by_row() -> None:
    g = torch.Generator().manual_seed(0)
    logprobs, old = (-torch.rand(200, generator=g, dtype=torch.float64) for _ in range(2))
    advantages = torch.randn(200, generator=g, dtype=torch.float64)
    clip = 0.2
    expected = []
    for lp, olp, adv in zip(logprobs.tolist(), old.tolist(), advantages.tolist()):
        r = math.exp(lp - olp)
        expected.append(-min(r * adv, min(max(r, 1 - clip), 1 + clip) * adv))
    loss = clipped_surrogate(logprobs, old, advantages, clip)
    assert loss.item() == pytest.approx(sum(expected) / len(expected), rel=1e-9)


def test_clipped_surrogate_gradient_stops_outside_the_clip_range() -> None:
    """A positive advantage with a ratio above 1 + clip (or a negative one below 1 - clip) gets no
    gradient: the objective is flat there, which is what keeps the update proximal."""
    logprobs = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.9])).requires_grad_()
    old = torch.zeros(4)
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    clipped_surrogate(logprobs, old, advantages, 0.2).backward()
    grad = logprobs.grad
    assert grad is not None
    assert grad[0] == 0 and grad[1] == 0  # clipped
    assert grad[2] < 0 and grad[3] > 0  # inside: the loss falls as the good action's probability rises


def _batch(rows: int, seed: int = 0) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    return RolloutBatch(*(torch.randn(rows, 3, generator=g) for _ in range(5)), torch.arange(rows).float())


def test_every_epoch_visits_every_row_once_in_equal_minibatches() -> None:
    batch = _batch(24)
    minibatches = list(ppo_epochs(batch, 3, 4, torch.Generator().manual_seed(1)))
    assert len(minibatches) == 12
    assert all(isinstance(m, RolloutBatch) and m.returns.shape == (6,) for m in minibatches)
    for epoch in range(3):
        rows = torch.cat([m.returns for m in minibatches[4 * epoch : 4 * epoch + 4]])
        assert sorted(rows.tolist()) == list(range(24))
    first, second = (torch.cat([m.returns for m in minibatches[4 * e : 4 * e + 4]]) for e in (0, 1))
    assert not torch.equal(first, second)  # a fresh order each epoch
    for m in minibatches:  # the fields of a row stay together
        index = m.returns.long()
        assert torch.equal(m.obs, batch.obs[index])


def test_the_minibatches_are_those_of_the_loop_the_algorithms_wrote_out() -> None:
    """The shared loop draws what a loop written out in each algorithm would: one randperm per epoch
    from the learner's generator, cut into slices, so PPO, IMPALA and MAPPO draw the same minibatches."""
    batch = _batch(32)
    shared = [m.obs for m in ppo_epochs(batch, 2, 4, torch.Generator().manual_seed(7))]
    generator, written_out = torch.Generator().manual_seed(7), []
    for _ in range(2):
        order = torch.randperm(32, generator=generator)
        written_out += [batch.obs[order[start : start + 8]] for start in range(0, 32, 8)]
    assert all(torch.equal(a, b) for a, b in zip(shared, written_out, strict=True))


def test_one_minibatch_still_draws_an_order() -> None:
    """The generator advances the same whatever the minibatch count, so a config change does not
    shift a learner's later draws."""
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    list(ppo_epochs(_batch(8), 2, 1, g1))
    list(ppo_epochs(_batch(8), 2, 8, g2))
    assert torch.equal(g1.get_state(), g2.get_state())


def test_mappings_and_plain_tuples_keep_their_structure() -> None:
    flat = {"a/obs": torch.arange(6).reshape(6, 1), "a/returns": torch.arange(6)}
    for minibatch in ppo_epochs(flat, 1, 2, torch.Generator().manual_seed(0)):
        assert list(minibatch) == ["a/obs", "a/returns"]
        assert torch.equal(minibatch["a/obs"].squeeze(1), minibatch["a/returns"])
    pair = (torch.arange(4), torch.arange(4) * 10)
    for minibatch in ppo_epochs(pair, 1, 2, torch.Generator().manual_seed(0)):
        assert type(minibatch) is tuple and torch.equal(minibatch[0] * 10, minibatch[1])


@pytest.mark.parametrize(
    ("data", "minibatches", "message"),
    [
        ((torch.zeros(6), torch.zeros(5)), 1, "they must share rows"),
        ((torch.zeros(6),), 4, "4 minibatches do not divide 6 rows"),
        ((), 1, "at least one tensor"),
    ],
)
def test_batches_that_cannot_be_cut_are_refused(data: tuple, minibatches: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        next(ppo_epochs(data, 1, minibatches, torch.Generator()))


def test_linear_lr_decays_to_zero_and_stays_there() -> None:
    assert [linear_lr(1.0, update, 4) for update in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert linear_lr(2.5e-3, 3, 10) == 2.5e-3 * (1.0 - 3 / 10)  # lr * (1 - update / num_updates), exactly
