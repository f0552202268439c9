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
    terminated, truncated)`` on ``device``.  ``obs`` is stored column by
    column, like the state (``obs.t()`` is contiguous): use ``reshape`` rather
    than ``view``, or ``contiguous()`` where rows must be contiguous.

    ``validate=True`` also checks action *values*.  It is off by default
    because it needs ``.item()``, a device-to-host sync per step that stalls a
    GPU pipeline; shapes are always checked (they are host metadata).
    Unvalidated, actions below 0 push left and above 1 push right (the force is
    looked up by the action clamped to {0, 1}).
    """

    env_id = "CartPole-v1"
    state_dim = 4
    obs_dim = 4

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
        # Every constant as a 0-d tensor of the state's dtype: a Python float costs a
        # scalar-to-tensor conversion on each use (about 5 us on the CPU, a dozen
        # times a step), and CUDA would divide by a host scalar as a multiplication
        # by its reciprocal, not the IEEE division NumPy does.
        const = lambda v: torch.tensor(v, dtype=dtype, device=self.device)  # noqa: E731
        self._c_total_mass = const(self.total_mass)
        self._c_polemass_length = const(self.polemass_length)
        self._force_of_action = torch.tensor([-self.force_mag, self.force_mag], dtype=dtype, device=self.device)
        self._c_gravity = const(self.gravity)
        self._c_masspole = const(self.masspole)
        self._c_length = const(self.length)
        self._c_four_thirds = const(4.0 / 3.0)
        self._c_tau = const(self.tau)
        self._c_thresholds = torch.tensor([self.x_threshold, self.theta_threshold_radians], dtype=dtype,
                                          device=self.device)
        # (x_dot, xacc, theta_dot, thetaacc) per env, rewritten every step; stored
        # column by column like the state (see ``_columns_contiguous``)
        self._deriv = torch.empty((4, self.num_envs), dtype=dtype, device=self.device).t()
        self._deriv_velocities = self._deriv[:, 0::2]  # views made once: a slice costs 2-3 us a step
        self._deriv_xacc, self._deriv_thetaacc = self._deriv[:, 1], self._deriv[:, 3]

    def _draw_reset(self, n: int) -> torch.Tensor:
        fresh = torch.empty((n, 4), dtype=self.dtype, device=self.device)
        return fresh.uniform_(-0.05, 0.05, generator=self._gen)

    def _write_obs(self, state: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(state)

    def _check_action(self, action: Any) -> torch.Tensor:
        a = self._as_tensor(action)
        if tuple(a.shape) != (self.num_envs,):
            raise EnvError(
                f"CartPole-v1 expects actions of shape ({self.num_envs},) with values in {{0, 1}}, "
                f"got shape {tuple(a.shape)}"
            )
        if self.validate and not bool(((a == 0) | (a == 1)).all()):
            raise EnvError(f"CartPole-v1 actions must be 0 or 1, got values in [{a.min().item()}, {a.max().item()}]")
        return a if a.dtype in (torch.int64, torch.int32) else a.to(torch.int64)  # a lookup index

    def _advance(self, a: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        """gymnasium's expressions, written with in-place ops to save allocations.

        Every rewrite is exact in IEEE arithmetic: operands of ``+`` and ``*``
        swap (``a + b == b + a``), ``x * x`` is what ``x**2`` computes, the
        force is looked up instead of chosen, and the four Euler updates
        ``x + tau * x_dot`` run as one ``tau * deriv + state`` over the stacked
        derivatives.  So float64 still matches the NumPy backend.
        """
        s = self._state
        _, _, theta, theta_dot = s.unbind(1)
        total_mass, polemass_length = self._c_total_mass, self._c_polemass_length

        force = self._force_of_action.index_select(0, a.clamp(0, 1))
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        # temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        temp = (theta_dot * theta_dot).mul_(polemass_length).mul_(sintheta).add_(force).div_(total_mass)
        # thetaacc = (gravity * sintheta - costheta * temp)
        #            / (length * (4/3 - masspole * costheta**2 / total_mass))
        denom = torch.sub(self._c_four_thirds, (costheta * costheta).mul_(self._c_masspole).div_(total_mass))
        thetaacc = torch.mul(sintheta, self._c_gravity, out=self._deriv_thetaacc).sub_(costheta * temp).div_(
            denom.mul_(self._c_length))
        # xacc = temp - polemass_length * thetaacc * costheta / total_mass
        torch.sub(temp, (thetaacc * polemass_length).mul_(costheta).div_(total_mass), out=self._deriv_xacc)
        self._deriv_velocities.copy_(s[:, 1::2])  # x_dot and theta_dot

        new = torch.mul(self._deriv, self._c_tau).add_(s)
        # |x| > 2.4 or |theta| > 12 degrees, as 0/1 floats: |v| - threshold is
        # exactly positive when |v| exceeds it, and float arithmetic is cheaper
        # than comparisons on the CPU (4 us against 8 us at 4,096 envs)
        over = new[:, 0::2].abs().sub_(self._c_thresholds).relu_().sign_()
        torch.maximum(over[:, 0], over[:, 1], out=terminated)
        reward.fill_(1.0)
        return new
