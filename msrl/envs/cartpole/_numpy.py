"""CartPole-v1: gymnasium's cart-pole, ``num_envs`` at a time, on NumPy, torch or kernels.

``CartPoleBase`` (``msrl.envs.cartpole._base``) holds what every backend shares
(gymnasium's constants, the spaces, the 500-step limit); the physics is written once per backend:
``NumpyCartPole`` here, ``TorchCartPole`` in ``msrl.envs.cartpole._torch`` and
``cartpole.cu`` beside them.

The NumPy physics is gymnasium's ``CartPoleEnv.step`` written over arrays,
term for term and in the same order, so that with the same state and actions
the observations, rewards and flags are bit-identical to gymnasium's (NumPy's
array sin/cos give the same results as its scalar ones).  The state is float64
like gymnasium's; observations are float32.

Example::

    >>> env = CartPole(num_envs=4, seed=0)
    >>> obs, reward, terminated, truncated = env.step(np.array([0, 1, 1, 0]))
    >>> obs.shape, reward.dtype
    ((4, 4), dtype('float32'))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from msrl.core import ConfigError
from msrl.envs._base import Physics
from msrl.envs._kernels import KernelDynamics
from msrl.envs.cartpole._base import CartPoleBase
from msrl.envs.cartpole._torch import TorchCartPole


class NumpyCartPole(Physics[CartPoleBase]):
    """gymnasium's expressions over arrays, in the same association order (bit-exactness)."""

    def draw_reset(self, n: int) -> np.ndarray:
        return self.rng.uniform(low=-0.05, high=0.05, size=(n, 4))

    def write_obs(self, state: np.ndarray, out: np.ndarray) -> None:
        out[...] = state

    def step(self, state: np.ndarray, action: np.ndarray, reward: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        c = self.env
        x, x_dot, theta, theta_dot = state[:, 0], state[:, 1], state[:, 2], state[:, 3]
        total_mass, polemass_length, tau = c.total_mass, c.polemass_length, c.tau

        force = np.where(action, c.force_mag, -c.force_mag)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + polemass_length * np.square(theta_dot) * sintheta) / total_mass
        thetaacc = (c.gravity * sintheta - costheta * temp) / (
            c.length * (4.0 / 3.0 - c.masspole * np.square(costheta) / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass

        new = np.empty_like(state)
        np.add(x, tau * x_dot, out=new[:, 0])
        np.add(x_dot, tau * xacc, out=new[:, 1])
        np.add(theta, tau * theta_dot, out=new[:, 2])
        np.add(theta_dot, tau * thetaacc, out=new[:, 3])

        np.logical_or(np.abs(new[:, 0]) > c.x_threshold, np.abs(new[:, 2]) > c.theta_threshold_radians, out=terminated)
        reward.fill(1.0)  # +1 every step, the terminating one included
        return new


class CartPole(CartPoleBase):
    """Batched CartPole-v1 (same-step autoreset, 500-step time limit).

    ``step(action)`` takes actions of shape ``(num_envs,)`` with values in {0, 1}
    (integers, bools or integral floats) and returns float32 ``(obs (num_envs, 4),
    reward, terminated, truncated)``.  On torch, ``obs`` is stored column by
    column like the state (``obs.t()`` is contiguous): use ``reshape`` rather
    than ``view``.  Unvalidated torch and kernel backends push left for actions
    below 1 and right otherwise (the torch force is looked up by the action
    clamped to {0, 1}; the kernel pushes right for any nonzero action).

    The constants, spaces and time limit are ``CartPoleBase``'s (gymnasium's, as
    class attributes so that a subclass can change one).
    """

    physics = {"numpy": NumpyCartPole, "torch": TorchCartPole}
    kernel = "cartpole"

    def rollout(self, steps: int) -> Any:
        """Kernel backends only: step every env ``steps`` times with uniformly random
        actions in one launch (the state stays in registers), the "kernel alone"
        throughput.  Returns ``(num_envs, 2)`` in the state's dtype: per env, the
        summed return of the episodes that ended during the rollout and their
        number.  Those episodes bypass ``metrics()``; the running ones continue.
        """
        if not isinstance(self.dynamics, KernelDynamics):
            raise ConfigError(f"rollout runs on the kernel backends (cuda, cuda-emulated), not on {self.dynamics.name}")
        if not isinstance(steps, int) or steps < 0 or steps >= 2**31:
            raise ConfigError(f"steps must be a non-negative int32, got {steps!r}")
        out = self.arrays.empty((self.num_envs, 2), "real")
        elapsed = self.arrays.copy(self._episodes.lengths)  # the kernel advances this copy
        rng = self.dynamics.rng
        self.dynamics.launch(
            "cartpole_rollout", [self._state, elapsed, self.num_envs, steps, rng.seed, rng.advance(steps), out]
        )
        # CartPole pays +1 per step: a running episode's return is its length.
        self._episodes.discard()
        self._episodes.adopt_running(elapsed, elapsed)
        return out


__all__ = ["CartPole", "CartPoleBase", "NumpyCartPole"]
