"""The rollout buffer with agent groups (MAPPO, IPPO): one buffer for one agent or many, GAE per
agent, and a drained batch that is one flat mapping (no nested dicts cross a fragment cut)."""

from __future__ import annotations

import pytest
import torch

from msrl.core import AgentGroup, Box, Discrete
from msrl.rl import GROUP_SEPARATOR, RolloutBatch, RolloutBuffer, flat_groups, group_batches

STEPS, ENVS = 5, 3
OBS = Box(-1.0, 1.0, (2,))


def _groups() -> dict[str, AgentGroup]:
    return {
        "taggers": AgentGroup("taggers", 2, OBS, Discrete(5)),
        "runners": AgentGroup("runners", 3, OBS, Box(-1.0, 1.0, (2,))),
    }


def _step(t: int, groups: dict[str, AgentGroup]) -> tuple[dict, ...]:
    """Distinct, reproducible values for step ``t`` of every group."""
    g = torch.Generator().manual_seed(t)
    obs, actions, logprobs, values, rewards = {}, {}, {}, {}, {}
    for name, group in groups.items():
        n = group.num_agents
        obs[name] = torch.randn(ENVS, n, 2, generator=g)
        shape = (ENVS, n) if isinstance(group.action_space, Discrete) else (ENVS, n, 2)
        actions[name] = torch.randint(5, shape, generator=g) if len(shape) == 2 else torch.randn(shape, generator=g)
        logprobs[name], values[name], rewards[name] = (torch.randn(ENVS, n, generator=g) for _ in range(3))
    return obs, actions, logprobs, values, rewards


def _flags(t: int) -> tuple[torch.Tensor, torch.Tensor]:
    terminated = torch.tensor([1.0 if (t, e) == (1, 0) else 0.0 for e in range(ENVS)])
    truncated = torch.tensor([1.0 if (t, e) == (3, 2) else 0.0 for e in range(ENVS)])
    return terminated, truncated


def _filled(groups: dict[str, AgentGroup]) -> RolloutBuffer:
    buffer = RolloutBuffer(STEPS, ENVS, groups=groups, gamma=0.9, gae_lambda=0.8)
    for t in range(STEPS):
        buffer.insert(*_step(t, groups), *_flags(t))
    return buffer


def test_each_agent_gets_the_single_agent_advantages_of_its_own_rewards() -> None:
    """GAE per agent is the single-agent buffer run on that agent's column, the environment's
    termination and truncation ending every agent's episode."""
    groups = _groups()
    last = {name: torch.randn(ENVS, group.num_agents) for name, group in groups.items()}
    batches = group_batches(_filled(groups).drain(last))
    for name, group in groups.items():
        for agent in range(group.num_agents):
            single = RolloutBuffer(STEPS, ENVS, (2,), gamma=0.9, gae_lambda=0.8)
            for t in range(STEPS):
                obs, actions, logprobs, values, rewards = (v[name][:, agent] for v in _step(t, groups))
                single.insert(obs, torch.zeros(ENVS, dtype=torch.int64), logprobs, values, rewards, *_flags(t))
            expected = single.drain(last[name][:, agent])
            assert torch.equal(batches[name].advantages[:, agent], expected.advantages)
            assert torch.equal(batches[name].returns[:, agent], expected.returns)
            assert torch.equal(batches[name].obs[:, agent], expected.obs)


def test_a_drained_group_batch_is_flat_rows_by_agents() -> None:
    groups = _groups()
    batch = _filled(groups).drain({name: torch.zeros(ENVS, g.num_agents) for name, g in groups.items()})
    assert all(isinstance(value, torch.Tensor) for value in batch.values())  # flat: no nested dicts
    assert list(batch)[:2] == [f"taggers{GROUP_SEPARATOR}obs", f"taggers{GROUP_SEPARATOR}actions"]
    batches = group_batches(batch)
    assert list(batches) == ["taggers", "runners"]
    assert batches["taggers"].obs.shape == (STEPS * ENVS, 2, 2)
    assert batches["taggers"].actions.dtype == torch.int64 and batches["taggers"].actions.shape == (STEPS * ENVS, 2)
    assert batches["runners"].actions.shape == (STEPS * ENVS, 3, 2)
    # rows are (step, env) in order: row t * ENVS + e holds step t of environment e
    obs = _step(2, groups)[0]["runners"]
    assert torch.equal(batches["runners"].obs[2 * ENVS : 3 * ENVS], obs)


def test_flat_groups_and_group_batches_are_inverse() -> None:
    one = RolloutBatch(*(torch.full((4,), float(i)) for i in range(6)))
    two = RolloutBatch(*(torch.full((4, 2), float(-i)) for i in range(6)))
    flat = flat_groups({"b": one, "a": two})
    assert len(flat) == 12 and list(flat)[0] == "b/obs"
    back = group_batches(flat)
    assert list(back) == ["b", "a"]  # groups keep their order
    assert all(torch.equal(x, y) for x, y in zip(back["a"], two)) and all(
        torch.equal(x, y) for x, y in zip(back["b"], one)
    )


def test_a_grouped_buffer_refuses_what_only_a_single_agent_has() -> None:
    with pytest.raises(ValueError, match="normalize_reward is for single-agent rollouts"):
        RolloutBuffer(STEPS, ENVS, groups=_groups(), normalize_reward=True)
    with pytest.raises(ValueError, match="drain_trajectories is for single-agent rollouts"):
        _filled(_groups()).drain_trajectories(torch.zeros(ENVS, 2))


def test_a_grouped_buffer_checks_its_fill_and_resumes_its_position() -> None:
    groups = _groups()
    buffer = _filled(groups)
    with pytest.raises(RuntimeError, match="full"):
        buffer.insert(*_step(0, groups), *_flags(0))
    buffer.drain({name: torch.zeros(ENVS, g.num_agents) for name, g in groups.items()})
    with pytest.raises(RuntimeError, match="holds 0 of 5 steps"):
        buffer.drain({})
    buffer.insert(*_step(0, groups), *_flags(0))
    other = RolloutBuffer(STEPS, ENVS, groups=groups)
    other.load_state_dict(buffer.state_dict())
    assert other.position == 1
