"""GAE against a direct, per-environment reading of its definition, including the time-limit case."""

from __future__ import annotations

import pytest
import torch

from msrl.rl import RolloutBuffer, gae, normalize_advantages

GAMMA, LAMBDA = 0.9, 0.8


def _by_definition(rewards, values, terminated, truncated, last_value):
    """One environment at a time, one step at a time: delta_t, then the discounted sum of deltas
    until the episode ends.  A terminal state is worth 0; a time limit bootstraps from V(s_t)."""
    steps, envs = rewards.shape
    advantages = torch.zeros(steps, envs, dtype=torch.float64)
    for env in range(envs):
        deltas = []
        for t in range(steps):
            if terminated[t, env]:
                next_value = 0.0
            elif truncated[t, env]:
                next_value = float(values[t, env])
            else:
                next_value = float(values[t + 1, env]) if t + 1 < steps else float(last_value[env])
            deltas.append(float(rewards[t, env]) + GAMMA * next_value - float(values[t, env]))
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                total += weight * deltas[k]
                if terminated[k, env] or truncated[k, env]:
                    break
                weight *= GAMMA * LAMBDA
            advantages[t, env] = total
    return advantages


def _rollout(seed: int, steps: int = 12, envs: int = 5):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(steps, envs, generator=g, dtype=torch.float64)
    values = torch.randn(steps, envs, generator=g, dtype=torch.float64)
    terminated = (torch.rand(steps, envs, generator=g) < 0.15).double()
    truncated = (torch.rand(steps, envs, generator=g) < 0.15).double()
    truncated[3, 0] = terminated[3, 0] = 1.0  # both at once (a fall on the last allowed step): terminal wins
    last_value = torch.randn(envs, generator=g, dtype=torch.float64)
    return rewards, values, terminated, truncated, last_value


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_its_definition(seed: int) -> None:
    rollout = _rollout(seed)
    advantages, returns = gae(*rollout, GAMMA, LAMBDA)
    expected = _by_definition(*rollout)
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected + rollout[1])


def test_truncation_bootstraps_but_termination_does_not() -> None:
    rewards = torch.ones(1, 2, dtype=torch.float64)
    values = torch.full((1, 2), 5.0, dtype=torch.float64)
    last_value = torch.full((2,), 100.0, dtype=torch.float64)  # the next episode's first state: never used
    terminated = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    truncated = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    _, returns = gae(rewards, values, terminated, truncated, last_value, GAMMA, LAMBDA)
    assert returns.tolist() == [[1.0, 1.0 + GAMMA * 5.0]]


def test_rollout_buffer_passes_termination_and_truncation_apart() -> None:
    rewards, values, terminated, truncated, last_value = (x.float() for x in _rollout(5, steps=6, envs=3))
    buffer = RolloutBuffer(6, 3, (2,), gamma=GAMMA, gae_lambda=LAMBDA)
    for t in range(6):
        buffer.insert(
            torch.zeros(3, 2),
            torch.zeros(3, dtype=torch.int64),
            torch.zeros(3),
            values[t],
            rewards[t],
            terminated[t].numpy(),
            truncated[t].numpy(),
        )
    batch = buffer.drain(last_value)
    expected = _by_definition(rewards.double(), values.double(), terminated, truncated, last_value.double())
    torch.testing.assert_close(batch.advantages, expected.reshape(-1).float())


def test_normalize_advantages_matches_the_formula_and_keeps_a_single_sample() -> None:
    adv = torch.tensor([1.0, 2.0, 4.0, 9.0])
    expected = (adv - adv.mean()) / (adv.std() + 1e-8)
    assert torch.allclose(normalize_advantages(adv), expected)
    one = torch.tensor([3.5])
    assert torch.equal(normalize_advantages(one), one)  # the std of one value is NaN
