"""Ape-X DQN (``apex_dqn`` in ``algorithms/dqn.py``): each environment's fixed epsilon from its place
among the run's environments, the same under every split of them; the acting network's Q-value of
each action and value of what followed, from which the replay gives a new transition its initial
priority (one-step and n-step, checked by hand); bad settings in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from algorithms.dqn import ApeXActor, ApeXConfig, apex_epsilons
from fragments import PER_ITERATION, PER_STEP
from msrl.app import load_config, plan
from msrl.core import ConfigError, RunInfo, ValueKind
from msrl.rl import PrioritizedReplayBuffer

REPO = Path(__file__).resolve().parents[2]


def test_each_environment_explores_at_its_place_in_the_run_whatever_the_split() -> None:
    whole, total = RunInfo().share_of(8)
    assert (whole, total) == (range(8), 8)
    one = apex_epsilons(0.4, 7.0, whole, total)
    torch.testing.assert_close(one[[0, -1]], torch.tensor([0.4, 0.4**8]))
    assert bool((one[1:] < one[:-1]).all())
    halves = [RunInfo.for_copy(1, 1000, copy, 2).share_of(4) for copy in (0, 1)]
    assert halves == [(range(0, 4), 8), (range(4, 8), 8)]
    split = torch.cat([apex_epsilons(0.4, 7.0, indices, n) for indices, n in halves])
    torch.testing.assert_close(split, one)


def test_the_actor_takes_each_environments_epsilon_and_reports_the_q_value_of_its_action() -> None:
    config = ApeXConfig(num_envs=2, hidden_sizes=(16,), apex_epsilon=0.5, apex_alpha=7.0, compile=False)
    actor = ApeXActor(3, 4, config, RunInfo(seed=2, total_env_steps=1000))
    obs = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        values = actor.q(obs)
    greedy = values.argmax(-1)
    differs = torch.zeros(2)
    for _ in range(2000):
        action, q_taken = actor.act(obs)
        torch.testing.assert_close(q_taken, values.gather(-1, action[:, None]).squeeze(-1))
        differs += (action != greedy).float()
    # a random action differs from the greedy one 3 times in 4: env 0 at 0.5, env 1 at 0.5^8
    assert differs[0] / 2000 == pytest.approx(0.5 * 0.75, abs=0.04)
    assert differs[1] / 2000 < 0.01
    torch.testing.assert_close(actor.value(obs), values.max(-1).values)


def _tree(buffer: PrioritizedReplayBuffer) -> np.ndarray:
    return buffer.tree.values(np.arange(buffer.size))


def test_a_one_step_transition_enters_at_the_actors_td_error() -> None:
    buffer = PrioritizedReplayBuffer(8, (1,), alpha=0.5, epsilon=0.01, gamma=0.9)
    q, value = torch.tensor([1.0, 2.0, 0.5]), torch.tensor([3.0, 4.0, 9.0])
    reward, terminated = torch.tensor([0.5, -1.0, 1.0]), torch.tensor([0.0, 0.0, 1.0])
    buffer.insert(torch.zeros(3, 1), torch.zeros(3), reward, torch.zeros(3, 1), terminated, torch.zeros(3), q, value)
    td = [0.5 + 0.9 * 3.0 - 1.0, -1.0 + 0.9 * 4.0 - 2.0, 1.0 - 0.5]  # the terminated one does not bootstrap
    np.testing.assert_allclose(_tree(buffer), (np.abs(td) + 0.01) ** 0.5, rtol=1e-6)
    assert buffer.max_priority == pytest.approx(max(abs(x) for x in td) + 0.01)


def test_an_n_step_transition_enters_at_its_first_q_and_its_last_value() -> None:
    buffer = PrioritizedReplayBuffer(8, (1,), alpha=1.0, epsilon=0.0, n_step=2, gamma=0.5)
    zeros = torch.zeros(1)
    for t, (reward, q, value) in enumerate([(1.0, 2.0, 7.0), (3.0, 5.0, 6.0)]):
        buffer.insert(
            torch.full((1, 1), float(t)), zeros, torch.tensor([reward]), torch.zeros(1, 1), zeros, zeros,
            torch.tensor([q]), torch.tensor([value]),
        )  # fmt: skip
    # the window (t=0, t=1) completes: 1 + 0.5 * 3, bootstrapped by 0.5^2 * V after t=1, less Q at t=0
    assert buffer.size == 1
    np.testing.assert_allclose(_tree(buffer), [abs(1.0 + 0.5 * 3.0 + 0.25 * 6.0 - 2.0)], rtol=1e-6)


def test_without_the_actors_values_transitions_enter_at_the_largest_priority() -> None:
    buffer = PrioritizedReplayBuffer(8, (1,), alpha=1.0)
    buffer.max_priority = 3.0
    buffer.insert(torch.zeros(2, 1), torch.zeros(2), torch.ones(2), torch.zeros(2, 1), torch.zeros(2), torch.zeros(2))
    np.testing.assert_allclose(_tree(buffer), [3.0, 3.0])


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("algo.prioritized_replay=false", "apex_dqn samples a prioritized replay"),
        ("algo.start_epsilon=0.5", "algo.start_epsilon is DQN's epsilon schedule"),
        ("algo.apex_epsilon=1.5", "algo.apex_epsilon must be in"),
    ],
)
def test_bad_settings_get_one_line(setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(str(REPO / "configs" / "apex_dqn_cartpole.yaml"), [setting]).algo.validate()


def test_the_actors_values_travel_with_each_step_to_a_replay_of_its_own_and_priorities_come_back() -> None:
    config = load_config(
        str(REPO / "configs" / "apex_dqn_cartpole.yaml"),
        [
            "algo.compile=false",
            "policy={fragments: [{name: acting, components: [env, actor], replicas: 2},"
            " {name: replay, components: [buffer], replicas: 2}, {name: learn, components: [learner]}]}",
        ],
    )
    interfaces = {(str(i.value), i.src, i.dst): (i.op, i.kind, i.frequency) for i in plan(config).fdg.interfaces}
    assert interfaces[("%actor.act[1]", "acting", "replay")] == ("p2p", ValueKind.BATCHED, PER_STEP)  # Q(s, a)
    assert interfaces[("%actor.value", "acting", "replay")] == ("p2p", ValueKind.BATCHED, PER_STEP)  # V(s')
    assert interfaces[("%learner.td_errors", "learn", "replay")] == ("scatter", ValueKind.BATCHED, PER_ITERATION)
