"""Pendulum-v1 on NumPy: ``num_envs`` pendulums stepped with array operations.

The arithmetic follows gymnasium's ``PendulumEnv.step`` term for term, with
the same dtype promotion: the torque keeps the action's float dtype (float32
from a policy), so ``0.001 * u**2`` and ``3.0 * u`` are float32 products as in
gymnasium, while the state stays float64.

One deliberate difference: gymnasium squares with ``x ** 2`` on NumPy scalars,
which calls libm ``pow``; that is not always correctly rounded (about 1 in
1000 results is 1 ulp off the exact ``x * x``).  Array code uses ``x * x``.
The two can differ in the last bit of the float64 cost, which survives the
cast to the float32 reward only with probability ~1e-9 per step; observations
(which do not involve the cost) are unaffected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from msrl._errors import EnvError
from msrl._spaces import Box
from msrl.envs._episodes import NumpyBatchedEnv


class PendulumParams:
    """gymnasium's constants (``g`` is a constructor argument there and here)."""

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0  # noqa: E741 - gymnasium's name
    max_episode_steps = 200
    reset_high = (math.pi, 1.0)  # th ~ U(-pi, pi), thdot ~ U(-1, 1)

    def _constants(self, g: float) -> None:
        self.g = g
        # Computed with the same Python expressions as gymnasium.
        self._k_gravity = 3 * g / (2 * self.l)
        self._k_torque = 3.0 / (self.m * self.l**2)

    def _spaces(self) -> tuple[Box, Box]:
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        obs = Box(low=-high, high=high, shape=(3,), dtype="float32")
        act = Box(low=-self.max_torque, high=self.max_torque, shape=(1,), dtype="float32")
        return obs, act


class PendulumNumpy(PendulumParams, NumpyBatchedEnv):
    """Batched Pendulum-v1 (never terminates, 200-step time limit).

    ``step(action)`` takes a float array of shape ``(num_envs, 1)`` or
    ``(num_envs,)`` (clipped to [-2, 2]; NaN/inf raise ``EnvError``) and returns
    ``(obs, reward, terminated, truncated)``: float32 arrays of shapes
    ``(num_envs, 3)`` (cos th, sin th, thdot) and ``(num_envs,)``.
    """

    env_id = "Pendulum-v1"
    state_dim = 2

    def __init__(self, num_envs: int, seed: int = 0, g: float = 10.0) -> None:
        self._constants(g)
        super().__init__(num_envs, seed)
        self.observation_space, self.action_space = self._spaces()
        self._never = np.zeros(self.num_envs, dtype=bool)

    def _draw_reset(self, n: int) -> np.ndarray:
        high = np.array(self.reset_high)
        return self._rng.uniform(low=-high, high=high, size=(n, 2))

    def _obs(self, state: np.ndarray) -> np.ndarray:
        th = state[:, 0]
        obs = np.empty((state.shape[0], 3), np.float32)
        obs[:, 0] = np.cos(th)
        obs[:, 1] = np.sin(th)
        obs[:, 2] = state[:, 1]
        return obs

    def _check_action(self, action: Any) -> np.ndarray:
        a = action if isinstance(action, np.ndarray) else np.asarray(action)
        n = self.num_envs
        if a.shape != (n, 1) and a.shape != (n,):
            raise EnvError(f"Pendulum-v1 expects float actions of shape ({n}, 1) or ({n},), got shape {a.shape}")
        if a.dtype != np.float32 and a.dtype != np.float64:
            if a.dtype.kind not in "iuf":
                raise EnvError(f"Pendulum-v1 actions must be floats, got dtype {a.dtype}")
            a = a.astype(np.float32)
        if not np.isfinite(a).all():
            raise EnvError("Pendulum-v1 actions must be finite, got NaN or inf")
        return a.reshape(n)

    def step(self, action: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        u = np.clip(self._check_action(action), -self.max_torque, self.max_torque)
        s = self._state
        th, thdot = s[:, 0], s[:, 1]
        dt = self.dt

        an = (th + np.pi) % (2 * np.pi) - np.pi  # gymnasium's angle_normalize
        costs = an * an + 0.1 * (thdot * thdot) + 0.001 * (u * u)
        new = np.empty_like(s)
        newthdot = new[:, 1]
        np.add(thdot, (self._k_gravity * np.sin(th) + self._k_torque * u) * dt, out=newthdot)
        np.clip(newthdot, -self.max_speed, self.max_speed, out=newthdot)
        np.add(th, newthdot * dt, out=new[:, 0])

        reward = (-costs).astype(np.float32)
        return self._end_step(new, reward, self._never)  # _end_step does not write to it
