"""What every Pendulum-v1 backend reads: gymnasium's constants, ``g``, the spaces and the time limit.

Both physics modules (``msrl.envs.pendulum``'s NumPy one and
``msrl.envs.pendulum._torch``) import this module and neither imports the other;
``msrl.envs.pendulum.Pendulum`` adds the physics of each backend and the kernels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from msrl.core import Box
from msrl.envs._base import BatchedEnv


class PendulumBase(BatchedEnv):
    """Pendulum-v1 without its physics: gymnasium's constants and its ``g`` argument."""

    env_id = "Pendulum-v1"
    max_episode_steps = 200
    state_dim = 2
    reward_threshold = None  # gymnasium registers none for Pendulum-v1

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0  # noqa: E741 - gymnasium's name
    reset_high = (math.pi, 1.0)  # th ~ U(-pi, pi), thdot ~ U(-1, 1)

    def __init__(self, num_envs: int, seed: int = 0, *, g: float = 10.0, **backend: Any) -> None:
        self.g = float(g)
        # computed with the same Python expressions as gymnasium
        self.k_gravity = 3 * self.g / (2 * self.l)
        self.k_torque = 3.0 / (self.m * self.l**2)
        super().__init__(num_envs, seed, **backend)

    def spaces(self) -> tuple[Box, Box]:
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        obs = Box(low=-high, high=high, shape=(3,), dtype="float32")
        return obs, Box(low=-self.max_torque, high=self.max_torque, shape=(1,), dtype="float32")


__all__ = ["PendulumBase"]
