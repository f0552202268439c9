"""Elastic replica counts: ranges in a policy, the counts a cluster holds, and each component's
share of a checkpoint taken with another number of replicas (``load_regrouped``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from msrl import ConfigError
from msrl.app import fitting_counts, load_config
from msrl.core import Actor, Environment
from msrl.rl import ReplayBuffer, RolloutBuffer
from policies import load_policy

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml")


@pytest.mark.parametrize(
    ("spec", "fragment", "counts"),
    [
        ({"preset": "single_learner_coarse", "actors": "2..8"}, "rollout", (2, 8)),
        ({"preset": "async_single_learner", "actors": "1 .. 3"}, "rollout", (1, 3)),
        ({"preset": "single_learner_fine", "envs": "2..4"}, "env", (2, 4)),
        ({"preset": "multi_learner", "learners": "1..2"}, "worker", (1, 2)),
        ({"fragments": [{"name": "all", "components": ["*"], "replicas": "1..4"}]}, "all", (1, 4)),
    ],
)
def test_a_range_makes_a_fragment_elastic_starting_at_its_most(spec: dict, fragment: str, counts: tuple) -> None:
    policy = load_policy(spec)
    assert policy.elastic == {fragment: counts}
    assert policy.fragment(fragment).replicas == counts[1]
    smaller = policy.with_counts({fragment: counts[0]})
    assert smaller.fragment(fragment).replicas == counts[0] and smaller.elastic == policy.elastic
    again = load_policy({"name": policy.name, **policy.to_dict()})  # the range is what a policy writes
    assert again.elastic == policy.elastic


def test_fixed_counts_and_one_value_ranges_are_not_elastic() -> None:
    assert load_policy({"preset": "single_learner_coarse", "actors": 3}).elastic == {}
    assert load_policy({"preset": "single_learner_coarse", "actors": "3..3"}).elastic == {}
    with pytest.raises(ConfigError, match="has no replica range"):
        load_policy({"preset": "single_learner_coarse", "actors": 3}).with_counts({"rollout": 2})
    with pytest.raises(ConfigError, match="outside its range 2..4"):
        load_policy({"preset": "single_learner_coarse", "actors": "2..4"}).with_counts({"rollout": 5})


@pytest.mark.parametrize("bad", ["0..3", "4..2", "two..4", "2-4", 0, -1])
def test_a_bad_range_is_one_line_with_the_form_it_takes(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"policy.actors must be a positive integer or a range LO..HI"):
        load_policy({"preset": "single_learner_coarse", "actors": bad})
    with pytest.raises(ConfigError, match=r"fragment 'all': replicas must be a positive integer or a range"):
        load_policy({"fragments": [{"name": "all", "components": ["*"], "replicas": bad}]})


def _coarse(actors: str, num_envs: int = 8):
    return load_config(
        CONFIG, [f"policy={{preset: single_learner_coarse, actors: '{actors}'}}", f"algo.num_envs={num_envs}"]
    )


@pytest.mark.parametrize(
    ("actors", "nodes", "expected"),
    [
        ("1..8", [{"CPU": 16.0}], 8),  # all of them
        ("1..8", [{"CPU": 4.0}], 2),  # a learner's CPU and 3 left: 3 does not divide 8 environments
        ("1..8", [{"CPU": 2.0}, {"CPU": 2.0}, {"CPU": 2.0}], 4),  # across nodes
        ("2..8", [{"CPU": 2.0}], None),  # not even the least
        ("1..8", [{"CPU": 8.0, "GPU": 1.0}], 4),  # 7 CPUs left: 4 is the most that divides 8
    ],
)
def test_the_most_replicas_the_nodes_hold_that_divide_the_runs_quantities(
    actors: str, nodes: list, expected: int | None
) -> None:
    counts = fitting_counts(_coarse(actors), nodes)
    assert counts == (None if expected is None else {"rollout": expected})


def test_a_count_that_would_split_the_environments_unevenly_is_never_chosen() -> None:
    assert fitting_counts(_coarse("1..8", num_envs=6), [{"CPU": 64.0}]) == {"rollout": 6}
    assert fitting_counts(_coarse("4..5", num_envs=6), [{"CPU": 64.0}]) is None


# -- each component's share ----------------------------------------------------------------------------
def _replay(capacity: int, seed: int = 0) -> ReplayBuffer:
    return ReplayBuffer(capacity, (1,), batch_size=4, seed=seed)


def _fill(buffer: ReplayBuffer, first: int, count: int, envs: int = 1) -> None:
    """``count`` steps of ``envs`` environments, observation = insertion number (from ``first``)."""
    for step in range(count):
        obs = torch.arange(envs, dtype=torch.float32).reshape(envs, 1) + first + step * envs
        zeros = torch.zeros(envs)
        buffer.insert(obs, torch.zeros(envs, dtype=torch.int64), zeros, obs + 0.5, zeros, zeros)


def _held(buffer: ReplayBuffer) -> list[float]:
    """The observations a buffer holds, oldest first."""
    n, position = buffer.size, buffer.position
    order = torch.arange(n).roll(-position) if n == buffer.capacity else torch.arange(n)
    return buffer.obs[order, 0].tolist()


def test_fewer_replay_replicas_take_the_transitions_of_those_they_replace() -> None:
    old = [_replay(6, seed=i) for i in range(4)]
    for i, buffer in enumerate(old):
        _fill(buffer, first=100 * i, count=8)  # 8 into 6: the ring wrapped, the 2 oldest gone
    states = [buffer.state_dict() for buffer in old]
    new = [_replay(12, seed=10 + j) for j in range(2)]
    for j, buffer in enumerate(new):
        buffer.load_regrouped(states, j, 2)
    assert sorted(_held(new[0])) == sorted(_held(old[0]) + _held(old[1]))
    assert sorted(_held(new[1])) == sorted(_held(old[2]) + _held(old[3]))
    assert [buffer.inserted for buffer in new] == [16, 16]  # 4 x 8 offered, shared out by 2
    assert torch.equal(new[1].next_obs[: new[1].size, 0], new[1].obs[: new[1].size, 0] + 0.5)
    # oldest first, as written: ages interleave across the two old rings
    held = _held(new[0])
    assert held[-2:] == [107.0, 7.0] or held[-2:] == [7.0, 107.0]
    _fill(new[0], first=1000, count=1)  # it goes on as a ring: the next write replaces the oldest
    assert _held(new[0])[-1] == 1000.0 and len(_held(new[0])) == 12


def test_more_replay_replicas_share_each_old_ones_transitions_alternately() -> None:
    old = _replay(10)
    _fill(old, first=0, count=7)
    new = [_replay(5, seed=j) for j in range(2)]
    for j, buffer in enumerate(new):
        buffer.load_regrouped([old.state_dict()], j, 2)
    assert sorted(_held(new[0]) + _held(new[1])) == [float(x) for x in range(7)]
    assert _held(new[0]) == [0.0, 2.0, 4.0, 6.0] and _held(new[1]) == [1.0, 3.0, 5.0]
    assert torch.equal(new[0].generator.get_state(), old.generator.get_state())  # replica 0 goes on with its own


def test_a_replica_keeps_the_newest_transitions_its_capacity_holds() -> None:
    old = [_replay(8, seed=i) for i in range(2)]
    for i, buffer in enumerate(old):
        _fill(buffer, first=100 * i, count=8)
    small = _replay(4)
    small.load_regrouped([buffer.state_dict() for buffer in old], 0, 1)
    assert sorted(_held(small)) == [6.0, 7.0, 106.0, 107.0]


def test_a_rollout_buffer_starts_empty_with_the_reward_statistics_of_every_replica() -> None:
    old = [RolloutBuffer(4, 2, normalize_reward=True) for _ in range(2)]
    for i, buffer in enumerate(old):
        assert buffer.reward_scaler is not None
        buffer.reward_scaler.stats.update(torch.full((10,), float(i)))
    new = RolloutBuffer(4, 4, normalize_reward=True)
    new.load_regrouped([buffer.state_dict() for buffer in old], 0, 1)
    assert new.position == 0 and new.reward_scaler is not None
    assert new.reward_scaler.stats.count == 20
    assert new.reward_scaler.stats.mean.item() == pytest.approx(0.5)
    assert new.reward_scaler.stats.var.item() == pytest.approx(0.25)
    assert torch.equal(new.reward_scaler.returns, torch.zeros(4, dtype=torch.float64))


class _Explorer(Actor):
    """Weights, a random stream of its own and a count of the steps it took."""

    def __init__(self, seed: int) -> None:
        self.weights = torch.full((3,), float(seed))
        self.generator = torch.Generator().manual_seed(seed)
        self.env_steps = seed * 10
        self.memory: torch.Tensor | None = torch.ones(2)  # of the episodes in progress

    def act(self, obs: Any) -> Any:
        return obs

    def state_dict(self) -> dict[str, Any]:
        own = {"generator": self.generator.get_state(), "env_steps": self.env_steps, "memory": self.memory}
        return {"weights": self.weights.clone(), **own}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = state["weights"].clone()
        self.generator.set_state(state["generator"])
        self.env_steps = int(state["env_steps"])
        self.memory = state.get("memory")


def test_a_component_keeps_its_replicas_state_the_others_take_replica_0s_with_their_own_stream() -> None:
    old = [_Explorer(seed) for seed in (1, 2)]  # 10 and 20 steps taken
    states = [actor.state_dict() for actor in old]
    grown = [_Explorer(seed) for seed in (7, 8, 9, 6)]
    for replica, actor in enumerate(grown):
        actor.load_regrouped(states, replica, 4)
    assert [actor.weights[0].item() for actor in grown] == [1.0, 2.0, 1.0, 1.0]
    assert torch.equal(grown[1].generator.get_state(), old[1].generator.get_state())
    assert torch.equal(grown[2].generator.get_state(), torch.Generator().manual_seed(9).get_state())
    assert [actor.env_steps for actor in grown] == [7, 7, 7, 7]  # 30 steps in all, shared by 4 (rounded down)
    assert all(actor.memory is None for actor in grown)  # new episodes start with blank memories


class _Envs(Environment):
    def __init__(self) -> None:
        self.state = torch.arange(3)

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise AssertionError("a regrouped environment starts new episodes: nothing is loaded")


def test_environments_start_new_episodes_as_built() -> None:
    envs = _Envs()
    envs.load_regrouped([{"state": torch.zeros(6)}], 0, 2)
    assert torch.equal(envs.state, torch.arange(3))
