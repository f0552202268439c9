"""Pendulum-v1 in torch, on any device, without host syncs inside ``step``.

Same expressions and dtype promotion as ``msrl.envs.pendulum``.  Agreement
with the NumPy backend: float64 to the last bit of the float32 outputs (on CPU
observed bit-identical; torch's sin/cos may differ from libm by 1 ulp, so this
is not guaranteed), float32 within the tolerances documented in
``msrl.envs.consistency``.

The angle is normalised with ``fmod`` plus a sign fix, which is exactly how
NumPy's ``%`` works; ``torch.remainder`` computes ``a - b * floor(a / b)``,
which rounds differently once the pendulum has spun more than one turn.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from msrl._errors import EnvError
from msrl.envs._episodes import TorchBatchedEnv
from msrl.envs.pendulum import PendulumParams


class PendulumTorch(PendulumParams, TorchBatchedEnv):
    """Batched Pendulum-v1 on ``device``; state in ``dtype``.

    ``step(action)`` takes a float tensor (or NumPy array) of shape
    ``(num_envs, 1)`` or ``(num_envs,)`` and returns float32 tensors ``(obs
    (num_envs, 3), reward, terminated, truncated)`` on ``device``; ``obs`` is
    stored column by column, as in ``CartPoleTorch``.

    The torque keeps the action's dtype (float32 or float64, never wider than
    ``dtype``) so that a float64 env given float32 actions rounds the torque
    terms like gymnasium and the NumPy backend do.

    ``validate=True`` also rejects NaN/inf actions; it is off by default
    because the check needs a device-to-host sync per step.  Shapes are always
    checked.  Unvalidated, a NaN action makes that pendulum's state NaN.
    """

    env_id = "Pendulum-v1"
    state_dim = 2
    obs_dim = 3

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        validate: bool = False,
        g: float = 10.0,
    ) -> None:
        self._constants(g)
        super().__init__(num_envs, seed, device, dtype, validate)
        self.observation_space, self.action_space = self._spaces()
        self._two_pi = torch.tensor(2 * math.pi, dtype=dtype, device=self.device)

    def _draw_reset(self, n: int) -> torch.Tensor:
        fresh = torch.empty((n, 2), dtype=self.dtype, device=self.device)
        th_high, thdot_high = self.reset_high  # per column: no host-to-device copy of the bounds
        fresh[:, 0].uniform_(-th_high, th_high, generator=self._gen)
        fresh[:, 1].uniform_(-thdot_high, thdot_high, generator=self._gen)
        return fresh

    def _write_obs(self, state: torch.Tensor, out: torch.Tensor) -> None:
        th = state[:, 0]
        out[:, 0].copy_(torch.cos(th))  # in the state's dtype, then rounded, as NumPy does
        out[:, 1].copy_(torch.sin(th))
        out[:, 2].copy_(state[:, 1])

    def _check_action(self, action: Any) -> torch.Tensor:
        a = self._as_tensor(action)
        n = self.num_envs
        if tuple(a.shape) != (n, 1) and tuple(a.shape) != (n,):
            raise EnvError(f"Pendulum-v1 expects float actions of shape ({n}, 1) or ({n},), got shape {tuple(a.shape)}")
        if a.dtype not in (torch.float32, torch.float64) or (a.dtype == torch.float64 and self.dtype == torch.float32):
            a = a.to(self.dtype)
        if self.validate and not bool(torch.isfinite(a).all()):
            raise EnvError("Pendulum-v1 actions must be finite, got NaN or inf")
        return a.reshape(n)

    def _advance(self, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        u = action.clamp(-self.max_torque, self.max_torque)
        th, thdot = self._state.unbind(1)
        dt = self.dt

        mod = torch.fmod(th + math.pi, self._two_pi)
        an = torch.where(mod < 0, mod + self._two_pi, mod) - math.pi  # NumPy's (th + pi) % 2pi - pi
        costs = an * an + 0.1 * (thdot * thdot) + 0.001 * (u * u)
        newthdot = thdot + (self._k_gravity * torch.sin(th) + self._k_torque * u) * dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        new = torch.stack((newth, newthdot)).to(self.dtype).t()  # column by column, like the state

        reward.copy_(costs).neg_()  # rounding commutes with negation
        terminated.zero_()  # Pendulum never terminates, only truncates
        return new
