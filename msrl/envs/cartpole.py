"""CartPole-v1 on NumPy: ``num_envs`` carts stepped with array operations.

The arithmetic is gymnasium's ``CartPoleEnv.step`` written over arrays, term
for term and in the same order, so that with the same state and actions the
observations, rewards and flags are bit-identical to gymnasium's (NumPy's
array sin/cos give the same results as its scalar ones).  The state is float64
like gymnasium's; observations are float32.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from msrl._errors import EnvError
from msrl._spaces import Box, Discrete
from msrl.envs._episodes import NumpyBatchedEnv


class CartPoleParams:
    """gymnasium's constants, as class attributes so a subclass can change one
    (the consistency tests build a deliberately wrong-gravity cart this way)."""

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    length = 0.5  # half the pole's length
    force_mag = 10.0
    tau = 0.02  # seconds per step
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    max_episode_steps = 500

    @property
    def total_mass(self) -> float:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> float:
        return self.masspole * self.length

    def _spaces(self) -> tuple[Box, Discrete]:
        high = np.array(
            [self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], dtype=np.float32
        )
        return Box(low=-high, high=high, shape=(4,), dtype="float32"), Discrete(2)


class CartPoleNumpy(CartPoleParams, NumpyBatchedEnv):
    """Batched CartPole-v1 (same-step autoreset, 500-step time limit).

    ``step(action)`` takes an integer (or integral float, or bool) array of
    shape ``(num_envs,)`` with values in {0, 1}, and returns ``(obs, reward,
    terminated, truncated)``: float32 arrays of shapes ``(num_envs, 4)``,
    ``(num_envs,)``, ``(num_envs,)``, ``(num_envs,)``.
    """

    env_id = "CartPole-v1"
    state_dim = 4

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        super().__init__(num_envs, seed)
        self.observation_space, self.action_space = self._spaces()

    def _draw_reset(self, n: int) -> np.ndarray:
        return self._rng.uniform(low=-0.05, high=0.05, size=(n, 4))

    def _obs(self, state: np.ndarray) -> np.ndarray:
        return state.astype(np.float32)

    def _check_action(self, action: Any) -> np.ndarray:
        """One cheap pass: integers are viewed as unsigned, so negatives become
        huge and a single ``max() <= 1`` covers both bounds."""
        a = action if isinstance(action, np.ndarray) else np.asarray(action)
        if a.shape != (self.num_envs,):
            raise EnvError(
                f"CartPole-v1 expects actions of shape ({self.num_envs},) with values in {{0, 1}}, got shape {a.shape}"
            )
        kind = a.dtype.kind
        if kind == "i" or kind == "u":
            if a.view(f"u{a.dtype.itemsize}").max() > 1:
                raise EnvError(f"CartPole-v1 actions must be 0 or 1, got values in [{a.min()}, {a.max()}]")
        elif kind == "f":
            if not ((a == 0.0) | (a == 1.0)).all():
                bad = a[(a != 0.0) & (a != 1.0)][0]
                raise EnvError(f"CartPole-v1 actions must be 0 or 1, got {bad}")
        elif kind != "b":
            raise EnvError(f"CartPole-v1 actions must be integers 0 or 1, got dtype {a.dtype}")
        return a

    def step(self, action: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        a = self._check_action(action)
        s = self._state
        x, x_dot, theta, theta_dot = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
        total_mass, polemass_length, tau = self.total_mass, self.polemass_length, self.tau

        # gymnasium's expressions, same association order (bit-exactness).
        force = np.where(a, self.force_mag, -self.force_mag)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + polemass_length * np.square(theta_dot) * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass

        new = np.empty_like(s)
        np.add(x, tau * x_dot, out=new[:, 0])
        np.add(x_dot, tau * xacc, out=new[:, 1])
        np.add(theta, tau * theta_dot, out=new[:, 2])
        np.add(theta_dot, tau * thetaacc, out=new[:, 3])

        terminated = np.abs(new[:, 0]) > self.x_threshold
        terminated |= np.abs(new[:, 2]) > self.theta_threshold_radians
        reward = np.ones(self.num_envs, np.float32)  # +1 every step, the terminating one included
        return self._end_step(new, reward, terminated)
