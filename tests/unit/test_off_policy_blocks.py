"""The pieces of the off-policy algorithms (DQN, SAC): Polyak averaging of target networks, and the
replay buffer's storage (time-limited transitions with their last observations or dropped),
warm-up and uniform sampling."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from msrl.core import ConfigError, Environment
from msrl.envs.pendulum import Pendulum
from msrl.rl import (
    ReplayBatch,
    ReplayBuffer,
    keeps_final_obs,
    polyak_update_,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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


def test_more_transitions_than_the_capacity_leave_the_last_ones_in_ring_order() -> None:
    """Eight environments into a buffer of three: the last three transitions stay, each in the row it
    would have if the eight were written one by one, and the next insert goes on from there."""
    buffer = ReplayBuffer(3, (2,), batch_size=4, seed=0)
    zeros = torch.zeros(8)
    _insert(buffer, torch.arange(8.0), zeros, zeros)  # rows 0 1 2 0 1 2 0 1: 6 7 5
    assert buffer.state_dict()["obs"][:, 0].tolist() == [6.0, 7.0, 5.0] and len(buffer) == 3
    _insert(buffer, torch.tensor([8.0, 9.0]), torch.zeros(2), torch.tensor([1.0, 0.0]))  # 8: a time-limit cut
    assert buffer.state_dict()["obs"][:, 0].tolist() == [6.0, 7.0, 9.0]
    _check_consistent(buffer.sample(), {6, 7, 9})


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


def test_with_final_obs_time_limited_transitions_are_kept_where_their_last_observation_is_known() -> None:
    """Rows: going on; truncated with its episode's last observation; truncated with it unknown
    (NaN, fused kernels); terminated with it unknown.  The second is kept, not terminal, with its
    observation; the third dropped; the fourth kept with zeros, so its target's 0 x Q stays 0."""
    buffer = ReplayBuffer(8, (2,), batch_size=4, seed=0, final_obs=True)
    obs = torch.arange(8.0).view(4, 2)
    nan = float("nan")
    last = torch.tensor([[10.0, 11.0], [12.0, 13.0], [nan, nan], [nan, nan]])
    buffer.insert(obs, torch.arange(4), torch.ones(4), last, torch.tensor([0.0, 0, 0, 1]), torch.tensor([0.0, 1, 1, 0]))
    state = buffer.state_dict()
    assert state["size"] == 3 and state["inserted"] == 4
    assert state["actions"].tolist() == [0, 1, 3]
    assert state["terminated"].tolist() == [0.0, 0.0, 1.0]
    assert state["next_obs"].tolist() == [[10.0, 11.0], [12.0, 13.0], [0.0, 0.0]]
    plain = ReplayBuffer(8, (2,), batch_size=4, seed=0)  # step's obs as next_obs: every cut row dropped
    plain.insert(obs, torch.arange(4), torch.ones(4), last, torch.tensor([0.0, 0, 0, 1]), torch.tensor([0.0, 1, 1, 0]))
    assert plain.state_dict()["actions"].tolist() == [0, 3]


class _NoFinalObs(Environment):
    """A user's environment without final_obs()."""


def test_bootstrapping_time_limits_needs_an_environment_with_final_obs() -> None:
    assert keeps_final_obs(Pendulum(1), True) and not keeps_final_obs(_NoFinalObs(), False)
    with pytest.raises(ConfigError, match="algo.bootstrap_time_limits needs an environment with final_obs"):
        keeps_final_obs(_NoFinalObs(), True)
