"""``final_obs()``: the observations the last step ended in.  Where the step ended an episode (and
restarted it), the row is that episode's last observation, as gymnasium's own environment steps
to it from the same state; elsewhere it is the step's ``obs``.  Host physics keeps it from the
first call on (rows finished before are NaN); gymnasium's adapter gives its ``final_obs``; a
sharded environment joins its shards'."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

import msrl.envs
from msrl.envs import ShardedEnv, TorchArrays
from msrl.envs.cartpole import CartPole

ENVS, LIMIT = 6, 12


class ShortCartPole(CartPole):
    """CartPole cut at 12 steps: episodes end both ways, some by falling, the rest by the limit."""

    max_episode_steps = LIMIT


BACKENDS: dict[str, Callable[[], Any]] = {
    "numpy": lambda: ShortCartPole(ENVS, seed=3),
    "torch-indices": lambda: ShortCartPole(ENVS, seed=3, backend=TorchArrays("cpu", torch.float64, sparse=True)),
    "torch-masks": lambda: ShortCartPole(ENVS, seed=3, backend=TorchArrays("cpu", torch.float64, sparse=False)),
}


def _np(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _gymnasium_step(state: np.ndarray, action: int) -> np.ndarray:
    """Gymnasium's CartPole stepped once from ``state``, without a time limit or a reset."""
    env = gymnasium.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    env.state = state.copy()
    return np.asarray(env.step(int(action))[0])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_finished_rows_are_the_episodes_last_observations(backend: str) -> None:
    env = BACKENDS[backend]()
    env.final_obs()  # keeping starts here
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(3 * LIMIT):
        before = _np(env.get_state())
        action = rng.integers(0, 2, ENVS)
        obs, _, terminated, truncated = (_np(x) for x in env.step(action))
        final = _np(env.final_obs())
        for i in range(ENVS):
            if terminated[i] or truncated[i]:
                ends["terminated" if terminated[i] else "truncated"] += 1
                np.testing.assert_allclose(final[i], _gymnasium_step(before[i], action[i]), rtol=1e-6, atol=1e-6)
                assert not np.allclose(final[i], obs[i])  # not the next episode's first observation
            else:
                np.testing.assert_array_equal(final[i], obs[i])
    assert ends["terminated"] > 0 and ends["truncated"] > 0


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_rows_finished_before_the_first_call_are_nan(backend: str) -> None:
    env = BACKENDS[backend]()
    for _ in range(LIMIT):  # pushed left every step, the poles fall (or the limit comes) within 12
        obs, _, terminated, truncated = (_np(x) for x in env.step(np.zeros(ENVS, np.int64)))
        done = (terminated + truncated) > 0
        if done.any():
            break
    assert done.any()
    finished = _np(env.final_obs())
    assert np.isnan(finished[done]).all() and (finished[~done] == obs[~done]).all()
    env.reset()
    assert (_np(env.final_obs()) == _np(env.observe())).all()  # a reset finished nothing


def test_gymnasium_adapter_gives_gymnasiums_final_obs() -> None:
    env = msrl.envs.make("Pendulum-v1", 3, seed=5, backend="gymnasium")
    reference = gymnasium.make_vec(
        "Pendulum-v1",
        num_envs=3,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP},
    )
    reference.reset(seed=5)
    actions = np.random.default_rng(1).uniform(-2, 2, (205, 3, 1)).astype(np.float32)
    for t, action in enumerate(actions):
        obs, _, _, truncated = env.step(action)
        expected, *_, infos = reference.step(action)
        if t == 199:  # Pendulum's limit: every copy ends and restarts
            assert truncated.all()
            expected = np.stack(infos["final_obs"])
            assert not np.allclose(expected, obs)
        np.testing.assert_array_equal(env.final_obs(), expected)


def test_a_sharded_environment_joins_its_shards() -> None:
    sharded = ShardedEnv(lambda n, seed: ShortCartPole(n, seed=seed), ENVS, 0, 2)
    alone = [ShortCartPole(3, seed=0), ShortCartPole(3, seed=7919)]  # the shards' seeds
    for env in (sharded, *alone):
        env.final_obs()
    rng = np.random.default_rng(2)
    for _ in range(2 * LIMIT):
        action = rng.integers(0, 2, ENVS)
        sharded.step(action)
        for k, env in enumerate(alone):
            env.step(action[3 * k : 3 * k + 3])
        np.testing.assert_array_equal(sharded.final_obs(), np.concatenate([env.final_obs() for env in alone]))


@pytest.mark.parametrize("backend", ["numpy", "torch", "pettingzoo"])
def test_a_multi_agent_environment_gives_each_groups_last_observations(backend: str) -> None:
    """simple_spread cut at 5 steps against the same environment cut at 100 (its physics draws no
    noise): where the short one's episodes end, its ``final_obs()`` is the long one's observation at
    that step, not the next episode's first; every other step it is the step's own ``obs``."""
    if backend == "pettingzoo":
        pytest.importorskip("mpe2")
    short, long = (msrl.envs.make("simple_spread_v3", 3, seed=4, backend=backend, max_cycles=n) for n in (5, 100))
    short.final_obs()  # keeping starts here (host physics)
    rng = np.random.default_rng(1)
    for step in range(1, 7):
        actions = {"agents": rng.integers(0, 5, (3, 3))}
        obs, _, terminated, truncated = short.step(actions)
        reference = _np(long.step(actions)[0]["agents"])
        final = _np(short.final_obs()["agents"])
        if step == 5:
            assert (_np(truncated) == 1).all() and (_np(terminated) == 0).all()
            np.testing.assert_allclose(final, reference, rtol=1e-5, atol=1e-6)
            assert not np.allclose(final, _np(obs["agents"]))
        else:
            np.testing.assert_array_equal(final, _np(obs["agents"]))
        if step < 5:
            np.testing.assert_allclose(_np(obs["agents"]), reference, rtol=1e-5, atol=1e-6)
