"""Pendulum-v1's physics in torch, on any device, without host syncs.

Same expressions and dtype promotion as ``msrl.envs.pendulum``.  Agreement
with the NumPy backend: float64 to the last bit of the float32 outputs (on CPU
observed bit-identical; torch's sin/cos may differ from libm by 1 ulp, so this
is not guaranteed), float32 within the tolerances documented in
``msrl.envs.consistency``.

The torque keeps the action's dtype (float32 or float64, never wider than the
state) so that a float64 env given float32 actions rounds the torque terms like
gymnasium and the NumPy backend do.  The angle is normalised with ``fmod`` plus
a sign fix, which is exactly how NumPy's ``%`` works; ``torch.remainder``
computes ``a - b * floor(a / b)``, which rounds differently once the pendulum
has spun more than one turn.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from msrl.envs._base import Physics
from msrl.envs.pendulum._base import PendulumBase


class TorchPendulum(Physics[PendulumBase]):
    """Pendulum-v1 physics on ``env.arrays``'s device and dtype."""

    def __init__(self, env: PendulumBase, rng: Any) -> None:
        super().__init__(env, rng)
        self.dtype, self.device = env.arrays.dtype, env.arrays.device
        self._two_pi = torch.tensor(2 * math.pi, dtype=self.dtype, device=self.device)

    def draw_reset(self, n: int) -> torch.Tensor:
        fresh = torch.empty((n, 2), dtype=self.dtype, device=self.device)
        th_high, thdot_high = self.env.reset_high  # per column: no host-to-device copy of the bounds
        fresh[:, 0].uniform_(-th_high, th_high, generator=self.rng)
        fresh[:, 1].uniform_(-thdot_high, thdot_high, generator=self.rng)
        return fresh

    def write_obs(self, state: torch.Tensor, out: torch.Tensor) -> None:
        th = state[:, 0]
        out[:, 0].copy_(torch.cos(th))  # in the state's dtype, then rounded, as NumPy does
        out[:, 1].copy_(torch.sin(th))
        out[:, 2].copy_(state[:, 1])

    def step(
        self, state: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor
    ) -> torch.Tensor:
        c = self.env
        u = action.clamp(-c.max_torque, c.max_torque)
        th, thdot = state.unbind(1)
        dt = c.dt

        mod = torch.fmod(th + math.pi, self._two_pi)
        an = torch.where(mod < 0, mod + self._two_pi, mod) - math.pi  # NumPy's (th + pi) % 2pi - pi
        costs = an * an + 0.1 * (thdot * thdot) + 0.001 * (u * u)
        newthdot = thdot + (c.k_gravity * torch.sin(th) + c.k_torque * u) * dt
        newthdot = newthdot.clamp(-c.max_speed, c.max_speed)
        newth = th + newthdot * dt
        new = torch.stack((newth, newthdot)).to(self.dtype).t()  # column by column, like the state

        reward.copy_(costs).neg_()  # rounding commutes with negation
        terminated.zero_()  # Pendulum never terminates, only truncates
        return new


__all__ = ["TorchPendulum"]
