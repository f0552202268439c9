"""MultiAgentEnv: the agent axis, per-group spaces, actions, rewards and returns, on a toy env."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import msrl
from msrl.envs import MultiAgentEnv, Physics


class Walkers(MultiAgentEnv):
    """Group ``a`` walks +-1 per step and is paid its action; group ``b`` is paid 0.5 a step.
    Agent 0 of ``a`` reaching 3 ends the episode."""

    env_id, max_episode_steps = "Walkers-v0", 5

    def __init__(self, num_envs: int, seed: int = 0, n_a: int = 2, n_b: int = 3, **options):
        self.n_a, self.n_b = n_a, n_b
        self.state_dim = n_a + n_b
        super().__init__(num_envs, seed, **options)

    def agent_groups(self):
        return {
            "a": msrl.AgentGroup("a", self.n_a, msrl.Box(-9, 9, (1,)), msrl.Discrete(2)),
            "b": msrl.AgentGroup("b", self.n_b, msrl.Box(-9, 9, (1,)), msrl.Discrete(2)),
        }

    class NumpyWalk(Physics):
        def draw_reset(self, n):
            return np.zeros((n, self.env.state_dim))

        def write_obs(self, state, out):
            out["a"][..., 0] = state[:, : self.env.n_a]
            out["b"][..., 0] = state[:, self.env.n_a :]

        def step(self, state, actions, rewards, terminated):
            moves = np.concatenate([np.where(actions["a"], 1.0, -1.0), np.where(actions["b"], 1.0, -1.0)], 1)
            rewards["a"][:] = actions["a"]
            rewards["b"][:] = 0.5
            terminated[:] = state[:, 0] + moves[:, 0] >= 3
            return state + moves

    physics = {"numpy": NumpyWalk}


def actions(num_envs: int, a: int = 1, b: int = 0) -> dict:
    return {"a": np.full((num_envs, 2), a), "b": np.full((num_envs, 3), b)}


def test_values_are_dicts_batched_over_envs_then_agents():
    env = Walkers(4, seed=0)
    assert env.num_agents == 5 and set(env.groups) == {"a", "b"}
    assert env.observation_space == {"a": msrl.Box(-9, 9, (1,)), "b": msrl.Box(-9, 9, (1,))}
    obs, reward, terminated, truncated = env.step(actions(4))
    assert obs["a"].shape == (4, 2, 1) and obs["b"].shape == (4, 3, 1) and obs["a"].dtype == np.float32
    assert reward["a"].shape == (4, 2) and reward["b"].shape == (4, 3)
    assert terminated.shape == truncated.shape == (4,)
    np.testing.assert_array_equal(obs["b"][..., 0], -1.0)


def test_termination_resets_in_the_same_step_and_returns_are_per_group():
    env = Walkers(3, seed=0)
    for _ in range(2):
        env.step(actions(3))
    obs, _, terminated, _ = env.step(actions(3))  # agent a0 reaches 3
    np.testing.assert_array_equal(terminated, 1.0)
    np.testing.assert_array_equal(obs["a"], 0.0)  # next episode's first observation
    m = env.metrics()
    assert m["episodes"] == 3 and m["episode_length"] == 3
    assert m["episode_return/a"] == 3.0 and m["episode_return/b"] == 1.5
    assert m["episode_return"] == pytest.approx((2 * 3.0 + 3 * 1.5) / 5)


def test_time_limit_truncates():
    env = Walkers(2, seed=0)
    for _ in range(4):
        env.step(actions(2, a=0))
    _, _, terminated, truncated = env.step(actions(2, a=0))
    np.testing.assert_array_equal(truncated, 1.0)
    np.testing.assert_array_equal(terminated, 0.0)


def test_bad_actions_name_the_group_and_the_shape():
    env = Walkers(2, seed=0)
    with pytest.raises(msrl.EnvError, match="group 'a' expects actions of shape \\(2, 2\\)"):
        env.step({"a": np.ones((2, 3), int), "b": np.zeros((2, 3), int)})
    with pytest.raises(msrl.EnvError, match="groups \\['a', 'b'\\]"):
        env.step({"a": np.ones((2, 2), int)})
    with pytest.raises(msrl.EnvError, match="dict of actions keyed by group"):
        env.step(np.ones(2))
    with pytest.raises(msrl.EnvError, match="0 or 1"):
        env.step(actions(2, a=2))


def test_checkpoint_resumes_group_returns_exactly():
    env = Walkers(2, seed=0)
    env.step(actions(2))
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    other = Walkers(2, seed=5)
    other.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    for e in (env, other):
        for _ in range(2):
            e.step(actions(2))
    assert env.metrics() == other.metrics()
    assert other.metrics() == {}


def test_a_group_with_no_agents_is_refused():
    with pytest.raises(msrl.ConfigError, match="group 'b' needs at least one agent"):
        Walkers(2, n_b=0)
