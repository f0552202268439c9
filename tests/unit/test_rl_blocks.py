"""msrl.rl's building blocks against reference formulas and reference implementations: action heads
against torch.distributions, n-step returns and V-trace against their definitions, Polyak averaging,
running statistics against numpy, the replay buffer's storage and sampling, and the actor-critic."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.distributions import Categorical, Normal, TanhTransform, TransformedDistribution

from msrl.core import Box, Discrete
from msrl.rl import (
    ActorCritic,
    ActorCriticActor,
    CategoricalHead,
    GaussianHead,
    ReplayBatch,
    ReplayBuffer,
    RewardScaler,
    RunningMeanStd,
    TwinMLP,
    gae,
    gaussian_entropy,
    gaussian_log_prob,
    nstep_returns,
    obs_stats_weights,
    polyak_update_,
    sample_tanh_gaussian,
    vtrace,
)

GAMMA = 0.9


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# Action heads


def test_gaussian_functions_match_torch_normal() -> None:
    """gaussian_log_prob / gaussian_entropy equal Normal(mean, std).log_prob(x).sum(-1) / .entropy().sum(-1)."""
    g = _gen(0)
    mean, log_std, x = (torch.randn(7, 3, generator=g, dtype=torch.float64) for _ in range(3))
    normal = Normal(mean, log_std.exp())
    torch.testing.assert_close(gaussian_log_prob(mean, log_std, x), normal.log_prob(x).sum(-1))
    torch.testing.assert_close(gaussian_entropy(log_std), normal.entropy().sum(-1))


def test_gaussian_head_matches_torch_normal() -> None:
    """GaussianHead's sample/log_prob/entropy/mode agree with Normal(mean, exp(log_std)); log_std is per dimension."""
    head = GaussianHead(5, 3, log_std_init=-0.5, generator=_gen(1))
    with torch.no_grad():
        head.log_std.copy_(torch.tensor([-0.5, 0.2, 0.7]))
    assert head.log_std.shape == (3,)
    features = torch.randn(6, 5, generator=_gen(2))
    mean, log_std = head(features)
    assert mean.shape == log_std.shape == (6, 3)
    torch.testing.assert_close(log_std, head.log_std.expand(6, 3))
    normal = Normal(mean, log_std.exp())
    action, logprob = head.sample((mean, log_std), _gen(3))
    assert action.shape == (6, 3)
    torch.testing.assert_close(logprob, normal.log_prob(action).sum(-1))
    other = torch.randn(6, 3, generator=_gen(4))
    torch.testing.assert_close(head.log_prob((mean, log_std), other), normal.log_prob(other).sum(-1))
    torch.testing.assert_close(head.entropy((mean, log_std)), normal.entropy().sum(-1))
    assert torch.equal(head.mode((mean, log_std)), mean)


def test_gaussian_head_sampling_is_seeded_and_has_the_right_moments() -> None:
    """Same generator seed gives the same actions, another seed others; many draws have mean ~ mu and
    std ~ exp(log_std)."""
    mean = torch.tensor([1.0, -2.0, 0.5]).expand(20000, 3)
    log_std = torch.tensor([-1.0, 0.0, 0.5]).expand(20000, 3)
    a1, _ = GaussianHead.sample((mean, log_std), _gen(7))
    a2, _ = GaussianHead.sample((mean, log_std), _gen(7))
    a3, _ = GaussianHead.sample((mean, log_std), _gen(8))
    assert torch.equal(a1, a2)
    assert not torch.equal(a1, a3)
    std = log_std[0].exp()
    torch.testing.assert_close(a1.mean(0), mean[0], atol=4 * std.max().item() / 20000**0.5, rtol=0)
    torch.testing.assert_close(a1.std(0), std, atol=0.03, rtol=0.02)


def test_categorical_head_matches_torch_categorical() -> None:
    """CategoricalHead's sample/log_prob/entropy/mode agree with Categorical(logits=...)."""
    head = CategoricalHead(5, 4, generator=_gen(0))
    logits = head(torch.randn(8, 5, generator=_gen(1))) * 300
    dist = Categorical(logits=logits)
    action, logprob = head.sample(logits, _gen(2))
    assert action.shape == (8,) and action.dtype == torch.int64
    torch.testing.assert_close(logprob, dist.log_prob(action))
    every = torch.arange(4).unsqueeze(1).expand(4, 8)
    torch.testing.assert_close(head.log_prob(logits.expand(4, 8, 4), every), dist.log_prob(every))
    torch.testing.assert_close(head.entropy(logits), dist.entropy())
    assert torch.equal(head.mode(logits), dist.probs.argmax(-1))


def test_categorical_sample_frequencies_match_softmax() -> None:
    """Empirical frequencies of many categorical samples are close to softmax(logits)."""
    logits = torch.tensor([[0.5, -1.0, 2.0, 0.0], [3.0, 3.0, -2.0, 1.0]])
    n = 20000
    actions, _ = CategoricalHead.sample(logits.repeat(n, 1), _gen(0))
    actions = actions.view(n, 2)
    probs = torch.softmax(logits, -1)
    for row in range(2):
        freq = torch.bincount(actions[:, row], minlength=4).float() / n
        torch.testing.assert_close(freq, probs[row], atol=4 * 0.5 / n**0.5, rtol=0)
    a1, _ = CategoricalHead.sample(logits.repeat(50, 1), _gen(1))
    a2, _ = CategoricalHead.sample(logits.repeat(50, 1), _gen(1))
    assert torch.equal(a1, a2)


@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_tanh_gaussian_matches_transformed_distribution(scale: float) -> None:
    """sample_tanh_gaussian's log prob equals TransformedDistribution(Normal, TanhTransform) at the same pre-tanh u."""
    g = _gen(0)
    mean = torch.randn(64, 3, generator=g) * scale
    log_std = torch.randn(64, 3, generator=g) * 0.5 - 0.5
    action, logprob = sample_tanh_gaussian(mean, log_std, _gen(11))
    u = mean + torch.randn(mean.shape, generator=_gen(11)) * log_std.exp()
    tanh = TanhTransform(cache_size=1)
    y = tanh(u)
    expected = TransformedDistribution(Normal(mean, log_std.exp()), [tanh]).log_prob(y).sum(-1)
    assert torch.equal(action, y)
    assert torch.isfinite(logprob).all()
    torch.testing.assert_close(logprob, expected, atol=1e-4, rtol=1e-5)
    if scale == 1.0:
        assert ((action > -1) & (action < 1)).all()
    else:
        assert (action.abs() <= 1).all()


# Returns


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


# Polyak averaging


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))


def test_polyak_update_is_a_convex_combination() -> None:
    """polyak_update_ gives (1 - tau) target + tau source per parameter; tau=1 copies; bad inputs raise."""
    target, source = _net(0), _net(1)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update_(target, source, 0.3)
    for old, new, src in zip(before, target.parameters(), source.parameters()):
        torch.testing.assert_close(new.detach(), 0.7 * old + 0.3 * src.detach())
    polyak_update_(target, source, 1.0)
    assert all(torch.equal(t, s) for t, s in zip(target.parameters(), source.parameters()))
    with pytest.raises(ValueError):
        polyak_update_(target, nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), 0.5)
    with pytest.raises(ValueError):
        polyak_update_(target, nn.Linear(3, 5), 0.5)
    for tau in (-0.1, 1.1):
        with pytest.raises(ValueError):
            polyak_update_(target, source, tau)


# Running statistics


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


# Replay buffer


def _steps(envs: int, steps: int, seed: int = 0):
    """Steps whose transitions carry their id in every field; some truncated, some terminated."""
    g = _gen(seed)
    for t in range(steps):
        ids = torch.arange(t * envs, (t + 1) * envs, dtype=torch.float32)
        terminated = (torch.rand(envs, generator=g) < 0.2).float()
        truncated = (torch.rand(envs, generator=g) < 0.3).float()
        yield ids, terminated, truncated


def _insert(buffer: ReplayBuffer, ids, terminated, truncated) -> None:
    obs = torch.stack((ids, -ids), -1)
    buffer.insert(obs, ids.long(), ids * 10, obs + 0.5, terminated, truncated)


def _check_consistent(batch: ReplayBatch, stored: set[int]) -> None:
    ids = batch.obs[..., 0]
    assert set(ids.long().flatten().tolist()) <= stored
    assert torch.equal(batch.obs[..., 1], -ids)
    assert torch.equal(batch.actions, ids.long())
    assert torch.equal(batch.rewards, ids * 10)
    assert torch.equal(batch.next_obs, batch.obs + 0.5)


def test_replay_buffer_stores_what_it_should() -> None:
    """Truncated-only rows are dropped, terminated rows kept; after wrap-around exactly the last capacity remain."""
    capacity, envs = 10, 4
    buffer = ReplayBuffer(capacity, (2,), batch_size=64, num_batches=3, seed=0)
    kept: list[int] = []
    terminal: dict[int, float] = {}
    both = dropped = 0
    for ids, terminated, truncated in _steps(envs, 8):
        _insert(buffer, ids, terminated, truncated)
        for i, te, tr in zip(ids.long().tolist(), terminated.tolist(), truncated.tolist()):
            both += bool(te and tr)
            dropped += bool(tr and not te)
            if te or not tr:
                kept.append(i)
                terminal[i] = te
        assert len(buffer) == min(len(kept), capacity)
    assert len(kept) > capacity and any(terminal.values()) and both and dropped
    stored = set(kept[-capacity:])
    assert set(buffer.state_dict()["obs"][:, 0].long().tolist()) == stored
    batch = buffer.sample()
    assert batch.obs.shape == (64, 3, 2) and batch.next_obs.shape == (64, 3, 2)
    assert batch.actions.shape == batch.rewards.shape == batch.terminated.shape == (64, 3)
    assert batch.actions.dtype == torch.int64 and batch.num_batches == 3
    _check_consistent(batch, stored)
    assert torch.equal(
        batch.terminated, torch.tensor([terminal[i] for i in batch.actions.flatten().tolist()]).view(64, 3)
    )
    for k in range(3):
        mb = batch.minibatch(k)
        assert all(torch.equal(a, b[:, k]) for a, b in zip(mb, batch))


def test_replay_buffer_warm_up_returns_zero_rows() -> None:
    """sample() returns zero rows until learning_starts transitions have been inserted, batch_size rows after."""
    buffer = ReplayBuffer(100, (2,), batch_size=16, num_batches=2, learning_starts=8, seed=0)
    assert buffer.sample().obs.shape == (0, 2, 2)
    zeros = torch.zeros(4)
    _insert(buffer, torch.arange(4.0), zeros, zeros)
    batch = buffer.sample()
    assert batch.obs.shape == (0, 2, 2) and batch.actions.shape == (0, 2)
    _insert(buffer, torch.arange(4.0, 8.0), zeros, zeros)
    batch = buffer.sample()
    assert batch.obs.shape == (16, 2, 2)
    _check_consistent(batch, set(range(8)))


def test_replay_buffer_warm_up_counts_inserted_transitions() -> None:
    """The warm-up counts env transitions inserted, dropped truncations included, so copies start in lockstep."""
    buffers = [ReplayBuffer(100, (2,), batch_size=16, learning_starts=8, seed=s) for s in range(2)]
    zeros = torch.zeros(4)
    truncated = torch.tensor([1.0, 1.0, 0.0, 0.0])
    for step in range(2):
        ids = torch.arange(4.0 * step, 4.0 * step + 4)
        _insert(buffers[0], ids, zeros, zeros)
        _insert(buffers[1], ids, zeros, truncated)
        rows = [b.sample().obs.shape[0] for b in buffers]
        assert rows == ([0, 0] if step == 0 else [16, 16])
    assert len(buffers[1]) == 4
    fresh = ReplayBuffer(100, (2,), batch_size=16, learning_starts=8, seed=1)
    fresh.load_state_dict(copy.deepcopy(buffers[1].state_dict()))
    assert fresh.sample().obs.shape[0] == 16


def test_replay_buffer_samples_uniformly() -> None:
    """Sampled row frequencies pass a loose chi-square test against the uniform distribution."""
    capacity = 50
    buffer = ReplayBuffer(capacity, (2,), batch_size=1000, num_batches=10, seed=3)
    zeros = torch.zeros(capacity)
    _insert(buffer, torch.arange(float(capacity)), zeros, zeros)
    ids = buffer.sample().actions.flatten()
    counts = torch.bincount(ids, minlength=capacity).double()
    expected = ids.numel() / capacity
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    dof = capacity - 1
    assert chi2 < dof + 6 * (2 * dof) ** 0.5
    assert counts.min() > 0


def test_replay_buffer_state_dict_round_trip() -> None:
    """A fresh buffer loaded from a state_dict samples, inserts and wraps exactly as the original."""
    a = ReplayBuffer(12, (2,), batch_size=8, num_batches=2, seed=5)
    steps = list(_steps(3, 10, seed=1))
    for step in steps[:6]:
        _insert(a, *step)
    a.sample()
    b = ReplayBuffer(12, (2,), batch_size=8, num_batches=2, seed=99)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert len(a) == len(b)
    for step in steps[6:]:
        assert all(torch.equal(x, y) for x, y in zip(a.sample(), b.sample()))
        _insert(a, *step)
        _insert(b, *step)
    assert all(torch.equal(x, y) for x, y in zip(a.sample(), b.sample()))
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in ("obs", "next_obs", "actions", "rewards", "terminated"))


def test_replay_buffer_continuous_actions() -> None:
    """A buffer with action_shape=(2,) float32 stores and samples continuous actions with their transitions."""
    buffer = ReplayBuffer(20, (2,), action_shape=(2,), action_dtype=torch.float32, batch_size=32, seed=0)
    ids = torch.arange(6.0)
    obs = torch.stack((ids, -ids), -1)
    actions = torch.stack((ids * 0.25, -ids * 0.5), -1)
    buffer.insert(obs, actions, ids, obs + 0.5, torch.zeros(6), torch.zeros(6))
    batch = buffer.sample()
    assert batch.actions.shape == (32, 1, 2) and batch.actions.dtype == torch.float32
    sampled = batch.obs[..., 0]
    assert torch.equal(batch.actions, torch.stack((sampled * 0.25, -sampled * 0.5), -1))
    assert torch.equal(batch.rewards, sampled)


# Actor-critic


BOX = Box(low=-2.0, high=2.0, shape=(1,))


@pytest.mark.parametrize("space", [Discrete(2), BOX])
def test_actor_critic_shapes_and_seeding(space) -> None:
    """ActorCritic's forward has the head's shapes; the seed alone determines the parameters."""
    net = ActorCritic(4, space, hidden=16, seed=3)
    params, value = net(torch.randn(5, 4, generator=_gen(0)))
    assert value.shape == (5,)
    if isinstance(space, Discrete):
        assert params.shape == (5, 2)
    else:
        assert params[0].shape == params[1].shape == (5, 1)
    same, other = ActorCritic(4, space, hidden=16, seed=3), ActorCritic(4, space, hidden=16, seed=4)
    pairs = list(zip(net.parameters(), same.parameters(), other.parameters()))
    assert all(torch.equal(p, q) for p, q, _ in pairs)
    assert not all(torch.equal(p, r) for p, _, r in pairs)


def test_actor_critic_matches_twin_mlp_with_the_same_seed() -> None:
    """ActorCritic(Discrete) and TwinMLP built from the same seed compute the same logits and values."""
    net = ActorCritic(4, Discrete(2), hidden=16, seed=7)
    twin = TwinMLP(4, 2, 16, _gen(7))
    x = torch.randn(32, 4, generator=_gen(1)) * 2
    with torch.no_grad():
        logits, value = net(x)
        twin_logits, twin_value = twin(x)
    torch.testing.assert_close(logits, twin_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(value, twin_value, atol=1e-5, rtol=0)


def test_actor_critic_actor_normalizes_with_the_statistics_it_is_sent() -> None:
    """act, value and greedy take raw observations and standardise them by the statistics that came
    with the weights (numpy's mean/var of the data behind them); the actor never updates them."""
    actor = ActorCriticActor(ActorCritic(3, BOX, hidden=16, seed=0), seed=1, normalize_obs=True, obs_shape=(3,))
    rng = np.random.default_rng(0)
    data = rng.normal([1.0, -5.0, 20.0], [0.5, 2.0, 10.0], size=(40, 3))
    stats = RunningMeanStd((3,))
    stats.update(torch.as_tensor(data))
    actor.set_weights({**actor.net.state_dict(), **obs_stats_weights(stats)})
    raw = rng.normal([1.0, -5.0, 20.0], [0.5, 2.0, 10.0], size=(6, 3))
    normalised = torch.as_tensor(
        np.clip((raw - data.mean(0)) / np.sqrt(data.var(0) + 1e-8), -10, 10), dtype=torch.float32
    )
    with torch.no_grad():
        params, value = actor.net(normalised)
    raw_t = torch.as_tensor(raw, dtype=torch.float32)
    torch.testing.assert_close(actor.greedy(raw_t), actor.net.head.mode(params), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(actor.value(raw_t), value, atol=1e-5, rtol=1e-5)
    actor.act(raw_t)
    assert actor.obs_stats.count == len(data)  # acting does not move the statistics


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


def test_actor_critic_actor_state_dict_round_trip() -> None:
    """An actor reloaded from a state_dict has the same statistics and draws the same next actions."""
    space = Discrete(3)
    a = ActorCriticActor(ActorCritic(3, space, hidden=16, seed=0), seed=1, normalize_obs=True, obs_shape=(3,))
    g = _gen(5)
    stats = RunningMeanStd((3,))
    stats.update(torch.randn(8, 3, generator=g) * 3 + 1)
    a.set_weights({**a.net.state_dict(), **obs_stats_weights(stats)})
    a.act(torch.randn(8, 3, generator=g) * 3 + 1)
    b = ActorCriticActor(ActorCritic(3, space, hidden=16, seed=9), seed=2, normalize_obs=True, obs_shape=(3,))
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert torch.equal(a.obs_stats.mean, b.obs_stats.mean) and torch.equal(a.obs_stats.var, b.obs_stats.var)
    for _ in range(3):
        obs = torch.randn(64, 3, generator=g) * 3 + 1
        assert all(torch.equal(x, y) for x, y in zip(a.act(obs), b.act(obs)))
    assert torch.equal(a.greedy(obs), b.greedy(obs))


def test_normalize_advantages_matches_the_formula_and_keeps_a_single_sample() -> None:
    from msrl.rl import normalize_advantages

    adv = torch.tensor([1.0, 2.0, 4.0, 9.0])
    expected = (adv - adv.mean()) / (adv.std() + 1e-8)
    assert torch.allclose(normalize_advantages(adv), expected)
    one = torch.tensor([3.5])
    assert torch.equal(normalize_advantages(one), one)  # the std of one value is NaN


def test_weights_carry_the_statistics_as_flat_entries() -> None:
    """The learner's weights with its observation statistics are one flat mapping (what may cross
    a fragment cut), and the actor reads network and statistics back from it."""
    learner_net = ActorCritic(3, BOX, hidden=16, seed=4)
    stats = RunningMeanStd((3,))
    stats.update(torch.randn(10, 3, generator=_gen(0)) * 4 + 2)
    weights = {**learner_net.state_dict(), **obs_stats_weights(stats)}
    assert all(isinstance(value, (torch.Tensor, int, float)) for value in weights.values())
    assert {"obs_stats.mean", "obs_stats.var", "obs_stats.count"} <= set(weights)
    actor = ActorCriticActor(ActorCritic(3, BOX, hidden=16, seed=0), seed=1, normalize_obs=True, obs_shape=(3,))
    actor.set_weights(weights)
    assert all(torch.equal(a, b) for a, b in zip(actor.net.state_dict().values(), learner_net.state_dict().values()))
    assert torch.equal(actor.obs_stats.mean, stats.mean) and actor.obs_stats.count == 10
    plain = ActorCriticActor(ActorCritic(3, BOX, hidden=16, seed=0), seed=1)
    plain.set_weights(weights)  # an actor without normalisation takes the network and ignores the statistics
    assert plain.obs_stats is None
