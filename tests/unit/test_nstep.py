"""n-step returns in the replay (``ReplayBuffer(n_step=...)``, DQN's ``algo.n_step``): each stored
transition against the sums written out by hand, for a full window, an episode that terminates
inside one, and one cut by a time limit (dropped); and a checkpoint taken with steps waiting."""

from __future__ import annotations

import pytest
import torch

from algorithms.dqn import DQNConfig, DQNLearner
from msrl.core import RunInfo
from msrl.rl import ReplayBuffer


def _step(buffer: ReplayBuffer, t: int, reward: list[float], terminated=(0, 0), truncated=(0, 0)) -> None:
    """One step of two environments: observation 10 * env + t, action t, the next observation t + 1."""
    obs = torch.tensor([[10.0 * e + t] for e in range(2)])
    buffer.insert(
        obs,
        torch.tensor([t, t]),
        torch.tensor(reward),
        obs + 1,
        torch.tensor(terminated, dtype=torch.float32),
        torch.tensor(truncated, dtype=torch.float32),
    )


def _stored(buffer: ReplayBuffer) -> list[tuple[float, float, float, float]]:
    n = buffer.size
    rows = zip(buffer.obs[:n, 0], buffer.rewards[:n], buffer.next_obs[:n, 0], buffer.terminated[:n])
    return sorted((float(o), round(float(r), 6), float(x), float(d)) for o, r, x, d in rows)


def test_full_windows_store_n_rewards_bootstrapped_from_n_steps_on() -> None:
    buffer = ReplayBuffer(16, (1,), n_step=3, gamma=0.5)
    _step(buffer, 0, [1.0, 2.0])
    _step(buffer, 1, [1.0, 2.0])
    assert buffer.size == 0 and buffer.inserted == 4  # waiting; counted as offered for the warm-up
    _step(buffer, 2, [4.0, 8.0])
    # obs_0, r0 + r1 / 2 + r2 / 4, the observation after step 2, not terminated
    assert _stored(buffer) == [(0.0, 2.5, 3.0, 0.0), (10.0, 5.0, 13.0, 0.0)]
    _step(buffer, 3, [0.0, 0.0])
    assert _stored(buffer)[1] == (1.0, 3.0, 4.0, 0.0)  # 1 + 4 / 2 + 0 / 4


def test_an_episode_that_terminates_stores_every_waiting_step_to_its_end_and_a_cut_one_is_dropped() -> None:
    buffer = ReplayBuffer(16, (1,), n_step=3, gamma=0.5)
    _step(buffer, 0, [1.0, 1.0])
    _step(buffer, 1, [2.0, 2.0], terminated=(1, 0), truncated=(0, 1))  # env 0 ends; env 1 is cut
    assert _stored(buffer) == [(0.0, 2.0, 2.0, 1.0), (1.0, 2.0, 2.0, 1.0)]  # 1 + 2 / 2, then 2
    _step(buffer, 2, [1.0, 1.0])
    _step(buffer, 3, [1.0, 1.0])
    _step(buffer, 4, [1.0, 1.0])
    stored = _stored(buffer)
    # both windows started again at step 2: env 1's steps 0 and 1 never stored
    assert (12.0, 1.75, 15.0, 0.0) in stored and (2.0, 1.75, 5.0, 0.0) in stored
    assert not any(obs in (10.0, 11.0) for obs, *_ in stored)


def test_a_checkpoint_keeps_the_waiting_steps() -> None:
    buffer = ReplayBuffer(16, (1,), n_step=3, gamma=0.5)
    _step(buffer, 0, [1.0, 1.0])
    _step(buffer, 1, [1.0, 1.0])
    again = ReplayBuffer(16, (1,), n_step=3, gamma=0.5)
    again.load_state_dict(buffer.state_dict())
    for b in (buffer, again):
        _step(b, 2, [1.0, 1.0])
    assert _stored(again) == _stored(buffer) and len(_stored(again)) == 2


def test_dqns_target_bootstraps_an_n_step_transition_with_gamma_to_the_n() -> None:
    config = DQNConfig(hidden_sizes=(8,), compile=False, n_step=3, gamma=0.9)
    learner = DQNLearner(4, 2, config, RunInfo(seed=2, total_env_steps=100))
    assert learner.discount == pytest.approx(0.9**3)
