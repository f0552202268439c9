"""What every CartPole-v1 backend reads: gymnasium's constants, the spaces and the time limit.

Both physics modules (``msrl.envs.cartpole``'s NumPy one and
``msrl.envs.cartpole._torch``) import this module and neither imports the other;
``msrl.envs.cartpole.CartPole`` adds the physics of each backend and the kernels.
"""

from __future__ import annotations

import math

import numpy as np

from msrl.core import Box, Discrete
from msrl.envs._base import BatchedEnv


class CartPoleBase(BatchedEnv):
    """CartPole-v1 without its physics.  The constants are gymnasium's, as class
    attributes so that a subclass can change one (the consistency tests build a
    deliberately wrong-gravity cart this way); the kernels have them compiled in."""

    env_id = "CartPole-v1"
    max_episode_steps = 500
    state_dim = 4
    reward_threshold = 475.0  # gymnasium's registry value for CartPole-v1

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    length = 0.5  # half the pole's length
    force_mag = 10.0
    tau = 0.02  # seconds per step
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    @property
    def total_mass(self) -> float:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> float:
        return self.masspole * self.length

    def spaces(self) -> tuple[Box, Discrete]:
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], dtype=np.float32)
        return Box(low=-high, high=high, shape=(4,), dtype="float32"), Discrete(2)


__all__ = ["CartPoleBase"]
