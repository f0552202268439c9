"""CartPole-v1 in torch, on any device, without host syncs inside ``step``.

Same expressions as ``msrl.envs.cartpole`` (and gymnasium) in the same order.
With ``dtype=torch.float64`` the outputs equal the NumPy backend's (observed
bit-identical on CPU, even over whole 500-step episodes).  This cannot be
guaranteed: torch computes sin/cos with its own routines (SLEEF on CPU, CUDA's
on GPUs), which may differ from libm by 1 ulp of the float64 state.  With
``float32`` the state itself is float32; ``msrl.envs.consistency`` documents
the tolerances, and a pole within rounding of the 12 degree / 2.4 m threshold
can then terminate one step earlier or later.

Divisors are 0-d tensors on the device, not Python floats: CUDA divides by a
host scalar as a multiplication by its reciprocal, which is not the IEEE
division NumPy does.
"""

from __future__ import annotations

from typing import Any

import torch

from msrl._errors import EnvError
from msrl.envs._episodes import TorchBatchedEnv
from msrl.envs.cartpole import CartPoleParams


class CartPoleTorch(CartPoleParams, TorchBatchedEnv):
    """Batched CartPole-v1 on ``device``; state in ``dtype``.

    ``step(action)`` takes a tensor (or NumPy array) of shape ``(num_envs,)``
    holding 0/1 and returns float32 tensors ``(obs (num_envs, 4), reward,
    terminated, truncated)`` on ``device``.

    ``validate=True`` also checks action *values*.  It is off by default
    because it needs ``.item()``, a device-to-host sync per step that stalls a
    GPU pipeline; shapes are always checked (they are host metadata).
    Unvalidated, any value other than 1 pushes left.
    """

    env_id = "CartPole-v1"
    state_dim = 4

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        validate: bool = False,
    ) -> None:
        super().__init__(num_envs, seed, device, dtype, validate)
        self.observation_space, self.action_space = self._spaces()
        const = lambda v: torch.tensor(v, dtype=dtype, device=self.device)  # noqa: E731
        self._total_mass_t = const(self.total_mass)
        self._force_pos = const(self.force_mag)
        self._force_neg = const(-self.force_mag)

    def _draw_reset(self) -> torch.Tensor:
        fresh = torch.empty((self.num_envs, 4), dtype=self.dtype, device=self.device)
        return fresh.uniform_(-0.05, 0.05, generator=self._gen)

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32, copy=True)  # never alias the live state

    def _check_action(self, action: Any) -> torch.Tensor:
        a = self._as_tensor(action)
        if tuple(a.shape) != (self.num_envs,):
            raise EnvError(
                f"CartPole-v1 expects actions of shape ({self.num_envs},) with values in {{0, 1}}, "
                f"got shape {tuple(a.shape)}"
            )
        if self.validate and not bool(((a == 0) | (a == 1)).all()):
            raise EnvError(f"CartPole-v1 actions must be 0 or 1, got values in [{a.min().item()}, {a.max().item()}]")
        return a

    def step(self, action: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        a = self._check_action(action)
        x, x_dot, theta, theta_dot = self._state.unbind(1)
        total_mass, polemass_length, tau = self._total_mass_t, self.polemass_length, self.tau

        force = torch.where(a == 1, self._force_pos, self._force_neg)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + polemass_length * theta_dot.square() * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass

        new_x = x + tau * x_dot
        new_theta = theta + tau * theta_dot
        new = torch.stack((new_x, x_dot + tau * xacc, new_theta, theta_dot + tau * thetaacc), dim=1)
        terminated = (new_x.abs() > self.x_threshold) | (new_theta.abs() > self.theta_threshold_radians)
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return self._end_step(new, reward, terminated)
