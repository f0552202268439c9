"""``simple_spread_v3``'s physics in torch, on any device, without host syncs.

Same expressions, in the same order, as ``msrl.envs.simple_spread`` (whose
docstring has the rules).  Agreement with the NumPy backend: float64 to the
last bit of the float32 outputs except where ``logaddexp`` (torch's vectorised
exp/log1p against libm's) differs by one float64 ulp, which moves a contact
force by ~1e-16 and survives the rounding to float32 only rarely; float32 within
``msrl.envs.consistency``'s float32 tolerances.
"""

from __future__ import annotations

from typing import Any

import torch

from msrl.envs._base import Physics
from msrl.envs.simple_spread._base import SimpleSpreadBase


class TorchSimpleSpread(Physics[SimpleSpreadBase]):
    """``simple_spread_v3`` physics on ``env.arrays``'s device and dtype."""

    def __init__(self, env: SimpleSpreadBase, rng: Any) -> None:
        super().__init__(env, rng)
        self.dtype, self.device = env.arrays.dtype, env.arrays.device
        n = env.N
        self._moves = torch.tensor(env.moves, dtype=self.dtype, device=self.device) * env.sensitivity
        self._zero = torch.zeros((), dtype=self.dtype, device=self.device)
        others = [[j for j in range(n) if j != i] for i in range(n)]
        self._others = (
            torch.arange(n, device=self.device)[:, None],
            torch.tensor(others, dtype=torch.int64, device=self.device).reshape(n, n - 1),
        )

    def draw_reset(self, n: int) -> torch.Tensor:
        c = self.env
        fresh = torch.zeros((n, 3, c.N, 2), dtype=self.dtype, device=self.device)
        fresh[:, 0].uniform_(-1.0, 1.0, generator=self.rng)
        fresh[:, 2].uniform_(-1.0, 1.0, generator=self.rng).mul_(c.landmark_range)
        return fresh.reshape(n, c.state_dim)

    def write_obs(self, state: torch.Tensor, out: dict[str, torch.Tensor]) -> None:
        n = self.env.N
        s = state.reshape(state.shape[0], 3, n, 2)
        pos, vel, landmarks = s[:, 0], s[:, 1], s[:, 2]
        obs = out["agents"]
        obs[:, :, 0:2].copy_(vel)  # in the state's dtype, then rounded, as NumPy does
        obs[:, :, 2:4].copy_(pos)
        end = 4 + 2 * n
        obs[:, :, 4:end].copy_((landmarks[:, None] - pos[:, :, None]).reshape(-1, n, 2 * n))
        if n > 1:
            rel = pos[:, None] - pos[:, :, None]  # rel[e, i, j] = p_j - p_i
            obs[:, :, end : end + 2 * (n - 1)].copy_(
                rel[:, self._others[0], self._others[1]].reshape(-1, n, 2 * (n - 1))
            )
            obs[:, :, end + 2 * (n - 1) :].zero_()  # the silent agents' communication

    @staticmethod
    def _distances(pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(p_i - p_j, |p_i - p_j|)`` for every pair, the distance ``inf`` where ``i == j``."""
        delta = pos[:, :, None] - pos[:, None]
        dx, dy = delta[..., 0], delta[..., 1]
        dist = torch.sqrt(dx * dx + dy * dy)
        dist.diagonal(dim1=1, dim2=2).fill_(float("inf"))
        return delta, dist

    def step(
        self,
        state: torch.Tensor,
        actions: dict[str, torch.Tensor],
        rewards: dict[str, torch.Tensor],
        terminated: torch.Tensor,
    ) -> torch.Tensor:
        c = self.env
        num, n = state.shape[0], c.N
        s = state.reshape(num, 3, n, 2)
        pos, vel, landmarks = s[:, 0], s[:, 1], s[:, 2]
        action = actions["agents"]
        if c.continuous_actions:
            a = action.clamp(0.0, 1.0)
            force = torch.stack((a[..., 2] - a[..., 1], a[..., 4] - a[..., 3]), -1).to(self.dtype) * c.sensitivity
        else:
            force = self._moves[action.clamp(0, len(c.moves) - 1)]  # unvalidated actions stay in the table

        delta, dist = self._distances(pos)
        penetration = torch.logaddexp(self._zero, -(dist - c.dist_min) / c.contact_margin) * c.contact_margin
        pair = c.contact_force * delta / dist[..., None] * penetration[..., None]  # 0 where i == j
        for j in range(n):
            force = force + pair[:, :, j]

        new_vel = vel * (1 - c.damping) + force * c.dt
        new_pos = pos + (new_vel if c.velocity_first else vel) * c.dt
        new = torch.stack((new_pos, new_vel, landmarks), 1).reshape(num, c.state_dim)

        _, dist = self._distances(new_pos)
        collisions = (dist < c.dist_min).sum(2)
        to_landmarks = new_pos[:, :, None] - landmarks[:, None]  # [e, agent, landmark]
        dx, dy = to_landmarks[..., 0], to_landmarks[..., 1]
        nearest = torch.sqrt(dx * dx + dy * dy).amin(1)
        coverage = torch.zeros(num, dtype=self.dtype, device=self.device)
        for k in range(n):
            coverage = coverage - nearest[:, k]
        if c.shared_reward:
            shared = coverage * n - n - collisions.sum(1).to(self.dtype)
            rewards["agents"].copy_(shared[:, None].expand(num, n))
        else:
            local = (-collisions).to(self.dtype) * c.local_ratio
            rewards["agents"].copy_((coverage * (1 - c.local_ratio))[:, None] + local)
        terminated.zero_()  # simple_spread never terminates, only truncates
        return new


__all__ = ["TorchSimpleSpread"]
