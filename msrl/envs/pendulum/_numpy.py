"""Pendulum-v1: gymnasium's pendulum, ``num_envs`` at a time, on NumPy, torch or kernels.

``PendulumBase`` (``msrl.envs.pendulum._base``) holds what every backend shares
(gymnasium's constants, ``g``, the spaces, the 200-step limit); the physics is written once per backend:
``NumpyPendulum`` here, ``TorchPendulum`` in ``msrl.envs.pendulum._torch`` and
``pendulum.cu`` beside them.

The NumPy arithmetic follows gymnasium's ``PendulumEnv.step`` term for term,
with the same dtype promotion: the torque keeps the action's float dtype
(float32 from a policy), so ``0.001 * u**2`` and ``3.0 * u`` are float32
products as in gymnasium, while the state stays float64.

One deliberate difference: gymnasium squares with ``x ** 2`` on NumPy scalars,
which calls libm ``pow``; that is not always correctly rounded (about 1 in
1000 results is 1 ulp off the exact ``x * x``).  Array code uses ``x * x``.
The two can differ in the last bit of the float64 cost, which survives the
cast to the float32 reward only with probability ~1e-9 per step; observations
(which do not involve the cost) are unaffected.
"""

from __future__ import annotations

import numpy as np

from msrl.envs._base import Physics
from msrl.envs.pendulum._base import PendulumBase
from msrl.envs.pendulum._torch import TorchPendulum


class NumpyPendulum(Physics[PendulumBase]):
    """gymnasium's expressions over arrays."""

    def draw_reset(self, n: int) -> np.ndarray:
        high = np.array(self.env.reset_high)
        return self.rng.uniform(low=-high, high=high, size=(n, 2))

    def write_obs(self, state: np.ndarray, out: np.ndarray) -> None:
        th = state[:, 0]
        out[:, 0] = np.cos(th)
        out[:, 1] = np.sin(th)
        out[:, 2] = state[:, 1]

    def step(self, state: np.ndarray, action: np.ndarray, reward: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        c = self.env
        u = np.clip(action, -c.max_torque, c.max_torque)
        th, thdot = state[:, 0], state[:, 1]
        dt = c.dt

        an = (th + np.pi) % (2 * np.pi) - np.pi  # gymnasium's angle_normalize
        costs = an * an + 0.1 * (thdot * thdot) + 0.001 * (u * u)
        new = np.empty_like(state)
        newthdot = new[:, 1]
        np.add(thdot, (c.k_gravity * np.sin(th) + c.k_torque * u) * dt, out=newthdot)
        np.clip(newthdot, -c.max_speed, c.max_speed, out=newthdot)
        np.add(th, newthdot * dt, out=new[:, 0])

        reward[...] = -costs  # rounded to float32 once, like astype
        terminated.fill(0.0)  # Pendulum never terminates, only truncates
        return new


class Pendulum(PendulumBase):
    """Batched Pendulum-v1 (never terminates, 200-step time limit).

    ``step(action)`` takes float torques of shape ``(num_envs, 1)`` or
    ``(num_envs,)``, clipped to [-2, 2], and returns float32 ``(obs, reward,
    terminated, truncated)``, ``obs`` = (cos th, sin th, thdot) of shape
    ``(num_envs, 3)``.  NaN/inf actions raise ``EnvError`` on NumPy (and on
    torch with ``validate=True``; unvalidated, a NaN makes that pendulum's
    state NaN).  ``g`` is gymnasium's constructor argument; the kernels compile
    it in (one build per value).
    """

    physics = {"numpy": NumpyPendulum, "torch": TorchPendulum}
    kernel = "pendulum"

    def kernel_defines(self) -> dict[str, object]:
        return {"MSRL_PENDULUM_G": repr(self.g)}


__all__ = ["NumpyPendulum", "Pendulum", "PendulumBase"]
