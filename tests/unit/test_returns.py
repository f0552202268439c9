"""n-step returns and V-trace against direct readings of their definitions (GAE has its own file,
test_gae.py)."""

from __future__ import annotations

import pytest
import torch

from msrl.rl import (
    gae,
    nstep_returns,
    vtrace,
)

GAMMA = 0.9


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rollout(seed: int, steps: int = 10, envs: int = 4, ends: bool = True):
    g = _gen(seed)
    rewards = torch.randn(steps, envs, generator=g, dtype=torch.float64)
    values = torch.randn(steps, envs, generator=g, dtype=torch.float64)
    terminated = (torch.rand(steps, envs, generator=g) < 0.2).double() * ends
    truncated = (torch.rand(steps, envs, generator=g) < 0.2).double() * ends
    last_value = torch.randn(envs, generator=g, dtype=torch.float64)
    return rewards, values, terminated, truncated, last_value


def _nstep_by_definition(rewards, values, terminated, truncated, last_value, gamma):
    steps, envs = rewards.shape
    out = torch.zeros(steps, envs, dtype=torch.float64)
    for env in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                total += weight * float(rewards[k, env])
                weight *= gamma
                if terminated[k, env]:
                    break
                if truncated[k, env]:
                    total += weight * float(values[k, env])
                    break
                if k == steps - 1:
                    total += weight * float(last_value[env])
            out[t, env] = total
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nstep_returns_match_definition_and_gae_lambda_one(seed: int) -> None:
    """nstep_returns equals a per-(t, env) discounted sum to rollout/episode end, and gae(lambda=1)'s returns."""
    rollout = _rollout(seed)
    assert rollout[2].any() and rollout[3].any()
    returns = nstep_returns(*rollout, GAMMA)
    torch.testing.assert_close(returns, _nstep_by_definition(*rollout, GAMMA))
    torch.testing.assert_close(returns, gae(*rollout, GAMMA, 1.0)[1])


def _vtrace_by_definition(mu, pi, rewards, values, terminated, truncated, last_value, gamma, rho_bar, c_bar):
    """IMPALA's direct sum, one env at a time; an episode end stops the sum (termination: next value 0,
    truncation: V(x_t))."""
    steps, envs = rewards.shape
    ratio = torch.exp(pi - mu)
    rho, c = ratio.clamp(max=rho_bar), ratio.clamp(max=c_bar)
    vs = torch.zeros(steps, envs, dtype=torch.float64)
    adv = torch.zeros(steps, envs, dtype=torch.float64)

    def next_value(t, env):
        if terminated[t, env]:
            return 0.0
        if truncated[t, env]:
            return float(values[t, env])
        return float(values[t + 1, env]) if t + 1 < steps else float(last_value[env])

    for env in range(envs):
        for s in range(steps):
            total, weight = float(values[s, env]), 1.0
            for t in range(s, steps):
                delta = float(rho[t, env]) * (
                    float(rewards[t, env]) + gamma * next_value(t, env) - float(values[t, env])
                )
                total += weight * delta
                if terminated[t, env] or truncated[t, env]:
                    break
                weight *= gamma * float(c[t, env])
            vs[s, env] = total
        for s in range(steps):
            if terminated[s, env]:
                nxt = 0.0
            elif truncated[s, env]:
                nxt = float(values[s, env])
            else:
                nxt = float(vs[s + 1, env]) if s + 1 < steps else float(last_value[env])
            adv[s, env] = float(rho[s, env]) * (float(rewards[s, env]) + gamma * nxt - float(values[s, env]))
    return vs, adv


@pytest.mark.parametrize("ends", [False, True])
@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (1.5, 0.8)])
def test_vtrace_matches_direct_sum(ends: bool, rho_bar: float, c_bar: float) -> None:
    """vtrace's v_s and advantages equal the paper's direct-sum definition with clipped importance ratios."""
    rollout = _rollout(3, ends=ends)
    g = _gen(4)
    mu = torch.randn(10, 4, generator=g, dtype=torch.float64)
    pi = mu + torch.randn(10, 4, generator=g, dtype=torch.float64) * 0.7
    ratio = torch.exp(pi - mu)
    assert (ratio > max(rho_bar, c_bar)).any() and (ratio < min(rho_bar, c_bar)).any()
    vs, adv = vtrace(mu, pi, *rollout, GAMMA, rho_bar, c_bar)
    ref_vs, ref_adv = _vtrace_by_definition(mu, pi, *rollout, GAMMA, rho_bar, c_bar)
    torch.testing.assert_close(vs, ref_vs)
    torch.testing.assert_close(adv, ref_adv)


@pytest.mark.parametrize("seed", [0, 1])
def test_vtrace_on_policy_is_nstep_returns(seed: int) -> None:
    """With pi = mu and episode ends, V-trace targets equal nstep_returns and advantages are returns minus values."""
    rollout = _rollout(seed)
    logp = torch.randn(10, 4, generator=_gen(9), dtype=torch.float64)
    vs, adv = vtrace(logp, logp.clone(), *rollout, GAMMA)
    returns = nstep_returns(*rollout, GAMMA)
    torch.testing.assert_close(vs, returns)
    rewards, values, terminated, truncated, last_value = rollout
    nxt = torch.where(truncated > 0, values, torch.cat((returns[1:], last_value.unsqueeze(0))))
    torch.testing.assert_close(adv, rewards + GAMMA * (1 - terminated) * nxt - values)


def test_vtrace_outputs_carry_no_gradient() -> None:
    """vtrace's outputs are constants even when its inputs require grad."""
    rollout = [x.clone().requires_grad_(x.is_floating_point()) for x in _rollout(0)]
    mu = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)
    pi = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)
    vs, adv = vtrace(mu, pi, *rollout, GAMMA)
    assert not vs.requires_grad and not adv.requires_grad
