"""A user's own environment: written on ``msrl.envs.BatchedEnv`` (physics only,
everything else shared) or on plain ``msrl.Environment``, registered with one
call and made by name.  Also the shared action checks for spaces the built-in
environments do not have (Discrete(3), a 2-d Box)."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch

import msrl
import msrl.envs
from msrl import Box, ConfigError, Discrete, EnvError
from msrl.core import EnvDefaults, building
from msrl.envs import MIN_ENVS_PER_SHARD, BatchedEnv, EpisodeTracker, NumpyArrays, Physics, ShardedEnv


class WalkPhysics(Physics):
    """A walker on a line: action 0 steps left, 1 stays, 2 steps right; reaching +-3
    ends the episode with reward 1 (else 0)."""

    def draw_reset(self, n: int) -> np.ndarray:
        return self.rng.integers(-1, 2, size=(n, 1)).astype(np.float64)

    def write_obs(self, state: np.ndarray, out: np.ndarray) -> None:
        out[...] = state

    def step(self, state, action, reward, terminated):
        new = state + (np.asarray(action, np.float64) - 1.0)[:, None]
        np.greater_equal(np.abs(new[:, 0]), 3.0, out=terminated)
        reward[...] = terminated
        return new


class Walk(BatchedEnv):
    env_id = "Walk-v0"
    max_episode_steps = 8
    state_dim = 1
    observation_space = Box(low=-3.0, high=3.0, shape=(1,))
    action_space = Discrete(3)
    physics = {"numpy": WalkPhysics}


class Drift(msrl.Environment):
    """The same contract written by hand on msrl.Environment, with the shared
    episode tracker: obs is a counter that ends the episode after 3 steps."""

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.num_envs = num_envs
        self.observation_space, self.action_space = Box(0.0, 3.0, (1,)), Box(-1.0, 1.0, (2,))
        self._arrays = NumpyArrays()
        self._check = msrl.envs.ActionCheck("Drift-v0", self.action_space, num_envs, self._arrays)
        self._episodes = EpisodeTracker(self._arrays, num_envs)
        self._t = np.zeros(num_envs)

    def reset(self, seed=None):
        self._t[:] = 0
        self._episodes.discard()
        return self.observe()

    def observe(self):
        return self._t[:, None].astype(np.float32)

    def step(self, action):
        action = self._check(action)
        self._t += 1
        truncated = (self._t >= 3).astype(np.float32)
        reward = action.sum(axis=1).astype(np.float32)
        self._episodes.record(reward, self._arrays.finished_rows(np.zeros_like(truncated), truncated))
        self._t[truncated > 0] = 0
        return self.observe(), reward, np.zeros_like(truncated), truncated

    def metrics(self):
        return self._episodes.metrics()


@pytest.fixture(autouse=True)
def registered():
    msrl.envs.register("Walk-v0", "numpy", Walk)
    msrl.envs.register("Drift-v0", "numpy", Drift)


def test_one_call_registers_and_makes_a_batched_env():
    assert "Walk-v0" in msrl.envs.env_ids() and msrl.envs.backends("Walk-v0") == ["numpy"]
    env = msrl.envs.make("Walk-v0", num_envs=5, seed=0)
    assert isinstance(env, Walk) and env.spec.env_id == "Walk-v0" and env.spec.backend == "numpy"
    assert msrl.envs.spec("Walk-v0").action_space == Discrete(3)
    obs = env.reset()
    assert obs.shape == (5, 1) and obs.dtype == np.float32
    right = np.full(5, 2)
    episodes = 0
    for _t in range(1, 9):
        obs, reward, terminated, truncated = env.step(right)
        assert all(v.dtype == np.float32 for v in (obs, reward, terminated, truncated))
        done = (terminated + truncated) > 0
        np.testing.assert_array_equal(reward, terminated)  # reward 1 exactly where the walk ends at +3
        assert np.all(np.abs(obs[done]) <= 1)  # same-step autoreset: a fresh start in [-1, 1]
        episodes += int(done.sum())
    metrics = env.metrics()
    assert metrics["episodes"] == episodes > 5 and metrics["episode_return"] == 1.0
    assert 2 <= metrics["episode_length"] <= 4


def test_the_time_limit_and_checkpoints_come_with_the_base():
    env = msrl.envs.make("Walk-v0", 3, seed=1)
    stay = np.ones(3, np.int64)
    flags = [env.step(stay)[3] for _ in range(8)]
    assert [f.all() for f in flags] == [False] * 7 + [True]  # max_episode_steps = 8
    assert env.metrics() == {"episode_return": 0.0, "episode_length": 8.0, "episodes": 3}
    rng = np.random.default_rng(0)
    for _ in range(5):
        env.step(rng.integers(0, 3, 3))
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    buf.seek(0)
    restored = Walk(3, seed=42)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    actions = rng.integers(0, 3, (40, 3))
    for a in actions:
        for x, y in zip(env.step(a), restored.step(a)):
            np.testing.assert_array_equal(x, y)
    assert env.metrics() == restored.metrics()


@pytest.mark.parametrize(
    "action, match",
    [
        (np.array([0, 1, 3]), r"Walk-v0 actions must be integers in \[0, 2\], got values in \[0, 3\]"),
        (np.array([0, -1, 2]), r"integers in \[0, 2\]"),
        (np.array([0.0, 1.5, 2.0]), r"integers in \[0, 2\]"),
        (np.zeros((3, 1), np.int64), r"shape \(3,\) with values in \{0, \.\.\., 2\}"),
    ],
)
def test_discrete_actions_beyond_two(action, match):
    with pytest.raises(EnvError, match=match):
        Walk(3).step(action)
    Walk(3).step(np.array([0.0, 1.0, 2.0]))  # integral floats are integers


def test_a_plain_environment_with_the_shared_pieces():
    env = msrl.envs.make("Drift-v0", 2)
    assert isinstance(env, Drift)
    for _ in range(6):
        env.step(np.full((2, 2), 0.5, np.float32))
    assert env.metrics() == {"episode_return": 3.0, "episode_length": 3.0, "episodes": 4}
    with pytest.raises(EnvError, match=r"float actions of shape \(2, 2\), got shape \(2,\)"):
        env.step(np.zeros(2, np.float32))  # (n,) is only accepted for a (1,)-shaped Box
    with pytest.raises(EnvError, match="finite"):
        env.step(np.array([[0.0, np.inf], [0.0, 0.0]]))


def test_backends_the_env_does_not_have_are_config_errors():
    with pytest.raises(ConfigError, match="'Walk-v0' has no 'torch' backend; valid choices: numpy"):
        msrl.envs.make("Walk-v0", 2, backend="torch")
    with pytest.raises(ConfigError, match="Walk-v0 has no torch physics; it runs on: numpy"):
        Walk(2, backend="torch")
    with pytest.raises(ConfigError, match="Walk-v0 has no kernels"):
        Walk(2, kernels=msrl.envs.Kernels(loader=lambda source, defines: None))
    with pytest.raises(ConfigError, match="num_envs must be a positive integer"):
        Walk(0)
    with pytest.raises(ConfigError, match="float64"):
        msrl.envs.make("CartPole-v1", 2, backend="numpy", dtype=np.float32)


def test_registering_needs_a_factory():
    with pytest.raises(ConfigError, match="factory"):
        msrl.envs.register("Walk-v1", "numpy", "not a factory")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCarContinuous-v0"])
def test_the_spec_carries_gymnasiums_reward_threshold(env_id):
    """msrl's own CartPole and Pendulum declare gymnasium's value; an id made through gymnasium reads it."""
    import gymnasium

    expected = gymnasium.spec(env_id).reward_threshold
    assert msrl.envs.spec(env_id).reward_threshold == expected
    for backend in msrl.envs.backends(env_id):
        if backend in ("numpy", "torch", "gymnasium"):
            assert msrl.envs.make(env_id, 2, backend=backend).spec.reward_threshold == expected, backend


def test_reward_threshold_is_what_the_environment_declares():
    assert msrl.envs.spec("Walk-v0").reward_threshold is None  # declares none
    assert msrl.envs.spec("Tag-v0").reward_threshold is None
    assert msrl.envs.spec("simple_spread_v3").reward_threshold is None

    class Solvable(Walk):
        reward_threshold = 0.9

    msrl.envs.register("Solvable-v0", "numpy", Solvable)
    assert msrl.envs.spec("Solvable-v0").reward_threshold == 0.9
    assert msrl.envs.make("Solvable-v0", 2).spec.reward_threshold == 0.9


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Tag-v0"])
def test_a_keyword_an_environment_does_not_take_is_a_config_error(env_id: str) -> None:
    """Through ``spec`` (what an algorithm sizes its networks with) and ``make`` alike, a
    ``ConfigError`` naming the keyword and the environment's own keywords, not a ``TypeError``."""
    for build in (lambda: msrl.envs.spec(env_id, speling=1), lambda: msrl.envs.make(env_id, 2, speling=1)):
        with pytest.raises(msrl.ConfigError, match=f"^{env_id} takes no keyword 'speling'; its keywords: ") as caught:
            build()
        listed = str(caught.value).partition("its keywords: ")[2]
        assert ("num_runners" in listed) == (env_id == "Tag-v0") and "num_envs" not in listed
        assert (listed == "none") == (env_id == "CartPole-v1")


def test_the_executors_defaults_reach_make_as_a_parameter():
    """Backend choice, device and threads come from the ``defaults`` argument (an algorithm
    passes ``run.env_defaults``), never from the build in progress."""
    torch_on_cpu = EnvDefaults(backends=("torch",), device="cpu")
    env = msrl.envs.make("CartPole-v1", 4, defaults=torch_on_cpu)
    assert env.spec.backend == "torch" and env.arrays.device == torch.device("cpu")
    with building(only=None):  # a build plan says which components to construct, nothing about envs
        assert msrl.envs.make("CartPole-v1", 4).spec.backend == "numpy"
    sharded = msrl.envs.make("CartPole-v1", 2 * MIN_ENVS_PER_SHARD, defaults=EnvDefaults(threads=2))
    assert isinstance(sharded, ShardedEnv) and len(sharded.shards) == 2
    assert not isinstance(msrl.envs.make("CartPole-v1", 2 * MIN_ENVS_PER_SHARD), ShardedEnv)
    with pytest.raises(ConfigError, match="defaults must be an msrl.EnvDefaults"):
        msrl.envs.make("CartPole-v1", 2, defaults={"threads": 2})


def test_a_fragments_copy_is_told_its_executors_environment_defaults():
    import fragments
    from algorithms.ppo import PPO, PPOConfig
    from fragments.executors import get_executor
    from policies import load_policy

    recipe = fragments.BuildRecipe(PPO, PPOConfig(num_envs=4), seed=1, total_env_steps=1000)
    policy = load_policy({"preset": "local", "executor": "cpu", "cpus": 2})
    fdg = fragments.partition(msrl.trace(fragments.declare(recipe)), policy)
    run = fragments.run_info(recipe, fdg, "local")
    assert run.env_defaults == get_executor("cpu").env_defaults(fdg.fragments["local"].spec)
    assert run.env_defaults.device == "cpu" and run.env_defaults.threads == min(2, os.cpu_count() or 1)
    assert fragments.run_info(recipe, None, None).env_defaults == EnvDefaults()
