"""``final_obs()`` on the fused kernels (here their CPU emulation): the step kernel resets a
finished environment inside the launch, so its episode's last observation is gone; those rows are
NaN, which the replay buffer reads as "drop the time-limited transition".  Elsewhere the rows are
the step's observations."""

from __future__ import annotations

import numpy as np
import pytest

import msrl.envs

pytestmark = pytest.mark.usefixtures("kernel_cache")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_finished_rows_are_nan_and_the_rest_the_step_obs(env_id: str) -> None:
    import fragments  # noqa: F401  (registers the kernel backends)

    env = msrl.envs.make(env_id, num_envs=4, seed=0, backend="cuda-emulated")
    action_space = env.action_space
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(210):  # past Pendulum's limit of 200; CartPole's random poles fall sooner
        if env_id == "CartPole-v1":
            action = rng.integers(0, 2, 4)
        else:
            action = rng.uniform(action_space.low, action_space.high, (4, 1)).astype(np.float32)
        obs, _, terminated, truncated = (np.asarray(x) for x in env.step(action))
        final = np.asarray(env.final_obs())
        done = (terminated + truncated) > 0
        finished += int(done.sum())
        assert np.isnan(final[done]).all()
        np.testing.assert_array_equal(final[~done], obs[~done])
    assert finished >= 4
