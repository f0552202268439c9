"""Running statistics against numpy: RunningMeanStd (observation normalisation, and the batch sums
that learner copies average), and RewardScaler (reward normalisation)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from msrl.rl import (
    RewardScaler,
    RunningMeanStd,
)

GAMMA = 0.9


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_running_mean_std_matches_numpy() -> None:
    """RunningMeanStd's mean/var equal numpy's over all batches; normalize is clip((x - mean)/sqrt(var + eps))."""
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 3)) * np.array([1.0, 10.0, 0.1]) for n in (1, 7, 64, 3, 200)]
    rms = RunningMeanStd((3,), epsilon=1e-8, clip=1.5)
    for b in batches:
        rms.update(torch.as_tensor(b))
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-12, atol=1e-12)
    assert rms.count == len(data)
    x = rng.normal(3.0, 10.0, size=(50, 3))
    expected = np.clip((x - data.mean(0)) / np.sqrt(data.var(0) + 1e-8), -1.5, 1.5)
    out = rms.normalize(torch.as_tensor(x, dtype=torch.float32))
    assert (out.abs() == 1.5).any() and (out.abs() < 1.5).any()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_running_mean_std_state_dict_round_trip() -> None:
    """Updates continued after a reload equal updates continued without one; a wrong shape raises."""
    g = _gen(0)
    batches = [torch.randn(n, 3, generator=g) for n in (5, 2, 9, 4)]
    a = RunningMeanStd((3,))
    for b in batches[:2]:
        a.update(b)
    b_ = RunningMeanStd((3,))
    b_.load_state_dict(copy.deepcopy(a.state_dict()))
    for b in batches[2:]:
        a.update(b)
        b_.update(b)
    assert torch.equal(a.mean, b_.mean) and torch.equal(a.var, b_.var) and a.count == b_.count
    with pytest.raises(ValueError):
        RunningMeanStd((4,)).load_state_dict(a.state_dict())


def test_reward_scaler_divides_by_std_of_discounted_returns() -> None:
    """RewardScaler's scale is numpy's std of all per-env discounted returns so far (reset at done)."""
    envs, steps, gamma = 3, 40, 0.95
    rng = np.random.default_rng(1)
    rewards = rng.normal(1.0, 2.0, size=(steps, envs))
    dones = rng.random((steps, envs)) < 0.1
    scaler = RewardScaler(envs, gamma)
    running, seen = np.zeros(envs), []
    for t in range(steps):
        out = scaler(torch.as_tensor(rewards[t], dtype=torch.float32), torch.as_tensor(dones[t]))
        running = gamma * running + rewards[t]
        seen.extend(running)
        running = np.where(dones[t], 0.0, running)
        expected = np.clip(rewards[t] / np.sqrt(np.var(seen) + 1e-8), -10, 10)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_reward_scaler_state_dict_round_trip() -> None:
    """A RewardScaler reloaded from a state_dict continues exactly as the original."""
    g = _gen(2)
    rewards = torch.randn(20, 4, generator=g)
    dones = torch.rand(20, 4, generator=g) < 0.15
    a = RewardScaler(4, 0.99)
    for t in range(10):
        a(rewards[t], dones[t])
    b = RewardScaler(4, 0.99)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    for t in range(10, 20):
        assert torch.equal(a(rewards[t], dones[t]), b(rewards[t], dones[t]))


def test_batch_sums_averaged_over_copies_give_the_whole_batch_statistics() -> None:
    """Two copies each take half of every batch; averaging their batch_sums and folding them in gives
    numpy's mean/var of everything, as one copy folding in whole batches does."""
    rng = np.random.default_rng(1)
    batches = [rng.normal([3.0, -1.0], [2.0, 0.1], size=(n, 2)) for n in (8, 64, 16)]
    whole, copies = RunningMeanStd((2,)), [RunningMeanStd((2,)) for _ in range(2)]
    for b in batches:
        whole.update_from_sums(whole.batch_sums(torch.as_tensor(b)))
        halves = [c.batch_sums(torch.as_tensor(h)) for c, h in zip(copies, np.split(b, 2))]
        average = (halves[0] + halves[1]) / 2
        for c in copies:
            c.update_from_sums(average.clone())
    data = np.concatenate(batches)
    for stats in [whole] + copies:
        np.testing.assert_allclose(stats.mean.numpy(), data.mean(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(stats.var.numpy(), data.var(0), rtol=1e-10, atol=1e-12)
    assert whole.count == len(data) and copies[0].count == len(data) // 2
