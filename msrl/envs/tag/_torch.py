"""Tag's physics in torch, on any device, without host syncs.

The rules are ``msrl.envs.tag``'s module docstring; the expressions are the
NumPy backend's, in the same order, so with ``dtype=torch.float64`` the outputs
equal NumPy's up to a 1-ulp difference of torch's cos/sin (SLEEF on the CPU,
CUDA's on GPUs) in the float64 state, which almost never survives the rounding
to float32.  With float32 the state itself is float32: positions drift from
NumPy's by rounding, and a runner within rounding of ``tagging_distance``, or
two others within rounding of the same distance, can be tagged or ordered
differently (``msrl.envs.consistency``'s float32 tolerances allow for it).

Nothing in a step reads a device value on the host: every choice is a
``torch.where``, the chunk loops run over static sizes, and the nearest others
are picked without ``nonzero`` (see ``NearestOthers``).  Constants are 0-d
tensors on the device (CUDA divides by a host scalar as a multiplication by its
reciprocal, which is not the IEEE division NumPy does).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from msrl.envs._base import Physics
from msrl.envs.tag._base import CHUNK_BYTES, SORT_MAX_AGENTS, TagBase, env_chunks


class TorchTag(Physics[TagBase]):
    """Tag's rules over tensors on ``env.arrays``'s device and dtype, laid out as ``NumpyTag``'s arrays
    (the state row viewed as ``(num_envs, 5, N)`` blocks), pairwise parts chunked by environment."""

    def __init__(self, env: TagBase, rng: Any) -> None:
        super().__init__(env, rng)
        self.env_chunks = env_chunks
        # an accelerator pays a launch per op and chunk, and has the memory for larger ones
        self.chunk_bytes = CHUNK_BYTES if env.arrays.device.type == "cpu" else 8 * CHUNK_BYTES
        device, dtype = env.arrays.device, env.arrays.dtype
        self.dtype, self.device = dtype, device
        self.T, self.N, self.M = env.num_taggers, env.num_agents, env.observed

        def const(value: Any) -> torch.Tensor:
            return torch.as_tensor(value, dtype=dtype, device=device)

        acc, turn = env.action_tables()
        self._moves = torch.stack((const(acc), const(turn)), -1)  # (actions, 2): acceleration, turn
        self._last_action = acc.size - 1
        self._max_speed = const(env.max_speeds())
        self._scale = torch.stack((const([env.world_size] * self.N), const([env.world_size] * self.N), self._max_speed))
        self._step_reward = const(env.step_rewards())
        self._is_tagger = const(env.is_tagger())
        self._other_pairs = torch.as_tensor(env.other_pairs(), device=device)
        self._two_pi = const(2 * math.pi)
        self._zero, self._inf = const(0.0), const(math.inf)
        self._world = const(env.world_size)
        self._tag_distance2 = const(env.tagging_distance * env.tagging_distance)
        self._max_steps = const(float(env.max_episode_steps))
        self._edge = const(env.edge_hit_penalty)
        self._tag_reward, self._tag_penalty = const(env.tag_reward_for_tagger), const(env.tag_penalty_for_runner)
        self._end_reward = const(env.end_of_game_reward_for_runner)
        self._nearest = NearestOthers(self.N, self.M, device)

    def draw_reset(self, n: int) -> torch.Tensor:
        N, W = self.N, self.env.world_size
        fresh = torch.zeros((n, 5 * N + 1), dtype=self.dtype, device=self.device)
        fresh[:, : 2 * N].uniform_(0.0, W, generator=self.rng)
        fresh[:, 3 * N : 4 * N].uniform_(0.0, 2 * math.pi, generator=self.rng)
        fresh[:, 4 * N : 5 * N] = 1.0
        return fresh

    def step(
        self,
        state: torch.Tensor,
        actions: dict[str, torch.Tensor],
        rewards: dict[str, torch.Tensor],
        terminated: torch.Tensor,
    ) -> torch.Tensor:
        c, N, T = self.env, self.N, self.T
        n = state.shape[0]
        a = torch.cat((actions["taggers"], actions["runners"]), 1).clamp_(0, self._last_action)
        move = self._moves[a]
        old = state[:, : 4 * N].view(n, 4, N)  # x, y, speed, heading
        active = state[:, 4 * N : 5 * N] > 0

        moved = torch.empty((n, 4, N), dtype=self.dtype, device=self.device)
        heading = torch.add(old[:, 3], move[..., 1], out=moved[:, 3])
        heading -= self._two_pi * torch.floor(heading / self._two_pi)
        speed = torch.minimum(torch.maximum(old[:, 2] + move[..., 0], self._zero), self._max_speed, out=moved[:, 2])
        position = moved[:, :2]
        torch.cos(heading, out=position[:, 0])
        torch.sin(heading, out=position[:, 1])
        position.mul_(speed[:, None]).add_(old[:, :2])  # x + speed cos(heading), y + speed sin(heading)
        clipped = torch.minimum(torch.maximum(position, self._zero), self._world)
        hit = (clipped != position).any(1)
        position.copy_(clipped)
        new = state.clone()  # keeps the state's column-by-column layout
        new[:, : 4 * N].view(n, 4, N).copy_(torch.where(active[:, None], moved, old))

        count, tagged = self._tags(new[:, : 2 * N].view(n, 2, N), active)
        runners_active = active[:, T:]
        if c.runner_exits_game_after_tagged:
            runners_active = runners_active & ~tagged
            new[:, 4 * N + T : 5 * N] = runners_active
        t = state[:, 5 * N] + 1.0
        new[:, 5 * N] = t

        reward = torch.where(hit, self._edge, self._zero) + self._step_reward
        reward[:, :T] += count * self._tag_reward
        reward[:, T:] += tagged * self._tag_penalty
        reward[:, T:] += (runners_active & (t == self._max_steps)[:, None]) * self._end_reward
        reward = torch.where(active, reward, self._zero)
        rewards["taggers"].copy_(reward[:, :T])
        rewards["runners"].copy_(reward[:, T:])
        terminated.copy_(~runners_active.any(1))
        return new

    def _tags(self, position: torch.Tensor, active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per tagger the number of runners it tags (in the state's dtype), per runner whether it is tagged;
        ``position`` ``(n, 2, N)`` after the move, ``active`` at the start of the step."""
        T = self.T
        n, R = position.shape[0], self.N - T
        count = torch.empty((n, T), dtype=self.dtype, device=self.device)
        tagged = torch.empty((n, R), dtype=torch.bool, device=self.device)
        for rows in self.env_chunks(n, T * R * 24, self.chunk_bytes):
            delta = position[rows, :, None, T:] - position[rows, :, :T, None]  # runner minus tagger
            delta.mul_(delta)
            within = (
                (delta[:, 0] + delta[:, 1] <= self._tag_distance2) & active[rows, :T, None] & active[rows, None, T:]
            )
            count[rows] = within.sum(2)
            tagged[rows] = within.any(1)
        return count, tagged

    def write_obs(self, state: torch.Tensor, out: dict[str, torch.Tensor]) -> None:
        N, T, M = self.N, self.T, self.M
        n, W = state.shape[0], self._world
        blocks = state[:, : 5 * N].view(n, 5, N)  # x, y, speed, heading, active
        position, heading, active = blocks[:, :2], blocks[:, 3], blocks[:, 4]
        # Per agent: its own 7 features, then the 3 others see of it (speed, is_tagger, active).
        features = torch.empty((n, N, 10), dtype=torch.float32, device=self.device)
        features[..., :3] = (blocks[:, :3] / self._scale).transpose(1, 2)  # x/W, y/W, speed/max_speed
        features[..., 3] = torch.cos(heading)
        features[..., 4] = torch.sin(heading)
        features[..., 5] = active
        features[..., 6] = (state[:, 5 * N] / self._max_steps)[:, None]
        features[..., 7] = features[..., 2]
        features[..., 8] = self._is_tagger
        features[..., 9] = active
        seen = features[..., 7:]
        groups = ((out["taggers"], 0, T), (out["runners"], T, N))
        for obs, lo, hi in groups:
            obs[..., :7] = features[:, lo:hi, :7]
        nearest_only = M < N - 1
        far = torch.where(active > 0, self._zero, self._inf) if nearest_only else None
        for rows in self.env_chunks(n, N * N * (48 if nearest_only else 40), self.chunk_bytes):
            delta = position[rows, :, None, :] - position[rows, :, :, None]  # (c, 2, N, N): j's minus i's
            if far is not None:  # nearest_only
                square = delta * delta
                d = (square[:, 0] + square[:, 1]).add_(far[rows, None, :])
                # self: after every other, inactive ones too (a view's fill: indexing with the agents' indices
                # sends the scalar from the host, which waits for the device)
                d.diagonal(dim1=1, dim2=2).fill_(math.nan)
                j = self._nearest.select(d)
                relative = (delta.gather(-1, j[:, None].expand(-1, 2, -1, -1)) / W).permute(0, 2, 3, 1)
                others = seen[torch.arange(j.shape[0], device=self.device)[:, None, None] + rows.start, j]
                for obs, lo, hi in groups:
                    view = obs[rows, :, 7:].view(-1, hi - lo, M, 5)
                    view[..., :2] = relative[:, lo:hi]
                    view[..., 2:] = others[:, lo:hi]
            else:
                # Every agent's view of every agent, self included, laid out as the
                # observations are; then each row's N - 1 others are taken by index.
                pairs = torch.empty((delta.shape[0], N, N, 5), dtype=torch.float32, device=self.device)
                pairs[..., :2] = (delta / W).permute(0, 2, 3, 1)
                pairs[..., 2:] = seen[rows, None]
                pairs = pairs.view(-1, N * N, 5)
                for obs, lo, hi in groups:
                    view = obs[rows, :, 7:].view(-1, hi - lo, M, 5)
                    view.copy_(pairs.index_select(1, self._other_pairs[lo:hi].reshape(-1)).view_as(view))


class NearestOthers:
    """``select(d)``: the column indices of the ``k`` smallest of each row of ``d``, ordered by
    ``(d, column)``; NaN (an agent's own column) counts as larger than everything, as torch's
    sort and topk order it.  Its own class so its constants are built once, on the device.

    Few columns (up to ``SORT_MAX_AGENTS``): one stable sort.  Many: ``topk`` gives each row's
    ``k``-th smallest value ``v`` (its values are exact; only which of equal values it picks
    is unspecified), then a second ``topk`` over unique integer keys picks the columns: ``-1``
    below ``v`` (fewer than ``k`` of them, so all taken), the column number at ``v`` (lowest
    columns first), past the end above.  No count of ties, so no sync; then a stable sort of
    the ``k`` chosen, in column order, orders them by distance.
    """

    def __init__(self, columns: int, k: int, device: torch.device) -> None:
        self.k, self.sort_max_agents = k, SORT_MAX_AGENTS
        self._columns = torch.arange(columns, device=device)
        self._minus_one = torch.tensor(-1, device=device)
        self._past_last = torch.tensor(columns, device=device)

    def select(self, d: torch.Tensor) -> torch.Tensor:
        k = self.k
        if d.shape[-1] <= self.sort_max_agents:
            return torch.sort(d, dim=-1, stable=True).indices[..., :k]
        kth = torch.topk(d, k, dim=-1, largest=False, sorted=False).values.amax(-1, keepdim=True)
        key = torch.where(d < kth, self._minus_one, torch.where(d == kth, self._columns, self._past_last))
        cols = torch.topk(key, k, dim=-1, largest=False, sorted=False).indices.sort(-1).values
        order = torch.sort(d.gather(-1, cols), dim=-1, stable=True).indices
        return cols.gather(-1, order)


__all__ = ["NearestOthers", "TorchTag"]
