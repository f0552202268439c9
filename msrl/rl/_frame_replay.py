"""A replay buffer for stacked frames that stores each frame once.

An Atari observation is the last 4 frames; a transition's observation and next observation share 3
of them, and consecutive transitions of one game share all 4.  Stored as whole stacks, a transition
costs 2 x 4 x 84 x 84 bytes (56 KB) and a 1M-transition replay 53 GiB; stored as frames, it costs
one new 84 x 84 frame (7 KB): 1M transitions in 7 GB.

Frames live in one ring of ``frames`` slots (oldest overwritten first), numbered by a serial that
counts every frame ever written; a stored stack is the serials of its frames (oldest first), so
stacks need not be contiguous and the games of a batch interleave freely.  Inserting a stack for
game ``e`` compares it with the last stack stored for ``e``:

* equal (the common case: this step's observation is the last step's next observation): nothing
  is written, the serials are reused;
* shifted by one (``stack[:-1] == last[1:]``: the next observation of a game that goes on): its
  newest frame is written;
* anything else (a new episode, a checkpoint restart): all its frames are written.

The comparison is of content, so what is sampled is exactly what was inserted whatever the
environment does; sharing only saves memory.  Reuse is limited to frames written within
``horizon`` serials of the batch being inserted (a game whose screen stands still would otherwise
keep referring to frames the ring is about to overwrite), which bounds each transition's oldest
frame from below; a transition is dropped before any of its frames can be overwritten
(``expires``), so every live transition can be sampled.  Both bounds are monotone in insertion
order: live transitions are always the newest ones, a contiguous stretch of the transition ring.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from msrl.core import Batched, Buffer, NoValue
from msrl.rl._replay import ReplayBatch, check_fits, write_ring
from msrl.rl._state import load_generator_state

_FIELDS = ("obs_ref", "next_ref", "actions", "rewards", "terminated", "expires")


class FrameReplayBuffer(Buffer):
    """``ReplayBuffer``'s contract (insert, sample, warm-up, time limits, checkpoints) for
    observations that are a stack of ``obs_shape[0]`` frames along their first axis, each frame
    stored once (see the module's docstring).

    ``frames`` (default ``capacity + capacity // 32 + horizon``) bounds the memory; with one new
    frame per transition and a few per new episode, about ``capacity`` transitions stay live.
    ``horizon`` (default ``max(capacity // 128, 64 * stack)``) is how recent a frame must be to be
    shared; it must cover a game's last stack, which is about ``stack x num_envs`` frames old.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
        batch_size: int = 256,
        num_batches: int = 1,
        learning_starts: int = 0,
        seed: int = 0,
        device: str = "cpu",
        final_obs: bool = False,
        obs_dtype: torch.dtype = torch.uint8,
        frames: int | None = None,
        horizon: int | None = None,
    ) -> None:
        if capacity < 1 or batch_size < 1 or num_batches < 1:
            raise ValueError(
                f"capacity, batch_size and num_batches must be >= 1, got {capacity}, {batch_size}, {num_batches}"
            )
        if len(obs_shape) < 2:
            raise ValueError(f"a frame replay needs observations (stack, *frame), got shape {tuple(obs_shape)}")
        self.stack, self.frame_shape = int(obs_shape[0]), tuple(int(n) for n in obs_shape[1:])
        self.horizon = max(capacity // 128, 64 * self.stack) if horizon is None else int(horizon)
        self.num_frames = capacity + capacity // 32 + self.horizon if frames is None else int(frames)
        if self.num_frames <= self.horizon + 2 * self.stack:
            raise ValueError(f"frames ({self.num_frames}) must exceed horizon + 2 x stack")
        check_fits(
            self.bytes_needed(capacity, obs_shape, obs_dtype, self.num_frames, action_shape, action_dtype),
            f"a replay buffer of {capacity:,} transitions",
            device,
        )
        self.capacity, self.batch_size, self.num_batches = capacity, batch_size, num_batches
        self.learning_starts = max(learning_starts, 1)
        self.final_obs = final_obs
        self.device = torch.device(device)
        zeros = lambda shape, dtype: torch.zeros(shape, dtype=dtype, device=self.device)  # noqa: E731
        self.frames = zeros((self.num_frames,) + self.frame_shape, obs_dtype)
        self.written = 0  # serial of the next frame written
        self.obs_ref = zeros((capacity, self.stack), torch.int64)
        self.next_ref = zeros((capacity, self.stack), torch.int64)
        self.actions = zeros((capacity,) + tuple(action_shape), action_dtype)
        self.rewards = zeros(capacity, torch.float32)
        self.terminated = zeros(capacity, torch.float32)
        self.expires = zeros(capacity, torch.int64)  # whole while `written` <= this
        self.last = np.full((0, self.stack), -1, dtype=np.int64)  # each game's last stack's serials
        self.last_stack = self.frames[:0, None]  # and its frames, sized at the first insert
        self.position = 0  # next transition row written
        self.size = 0  # live transitions: rows position - size ... position - 1 (mod capacity)
        self.inserted = 0  # transitions offered to insert, stored or not
        self.stored = 0  # transitions stored, over the buffer's life
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    @staticmethod
    def bytes_needed(
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: torch.dtype = torch.uint8,
        frames: int | None = None,
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
    ) -> int:
        """The bytes a buffer of ``capacity`` transitions allocates (``frames`` as the default)."""
        stack = int(obs_shape[0])
        if frames is None:
            frames = capacity + capacity // 32 + max(capacity // 128, 64 * stack)
        frame = math.prod(obs_shape[1:]) * obs_dtype.itemsize
        row = 2 * stack * 8 + math.prod(action_shape) * action_dtype.itemsize + 4 + 4 + 8
        return frames * frame + capacity * row

    def __len__(self) -> int:
        return self.size

    @property
    def frames_per_transition(self) -> float:
        """Frames written per transition stored so far (about 1 when games run on)."""
        return self.written / max(self.stored, 1)

    def _store(self, stacks: torch.Tensor, games: np.ndarray, floor: int) -> np.ndarray:
        """Store one stack per row of ``stacks`` for ``games``: their serials ``(rows, stack)``.

        A loop over rows with plain indexing: a batch holds a few games' stacks, and a
        vectorised gather costs more than the comparisons themselves at that size."""
        s, num_frames = self.stack, self.num_frames
        refs = np.empty((len(games), s), dtype=np.int64)
        for row, game in enumerate(games.tolist()):
            stack, last, previous = stacks[row], self.last[game], self.last_stack[game]
            known = last[0] >= max(floor, 0)
            if known and torch.equal(previous, stack):
                refs[row] = last
                continue
            if known and torch.equal(previous[1:], stack[:-1]):
                refs[row, :-1], refs[row, -1] = last[1:], self.written
                self.frames[self.written % num_frames].copy_(stack[-1])
                self.written += 1
            else:
                refs[row] = np.arange(self.written, self.written + s)
                for k in range(s):
                    self.frames[(self.written + k) % num_frames].copy_(stack[k])
                self.written += s
            self.last[game] = refs[row]
            previous.copy_(stack)
        return refs

    def insert(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any) -> NoValue:
        as_tensor = lambda x, dtype=None: torch.as_tensor(x, device=self.device, dtype=dtype)  # noqa: E731
        obs, next_obs = as_tensor(obs, self.frames.dtype), as_tensor(next_obs, self.frames.dtype)
        games = obs.shape[0]
        if self.last.shape[0] != games:
            if self.last.shape[0]:
                raise ValueError(f"this buffer holds {self.last.shape[0]} games' frames; insert gave {games}")
            self.last = np.full((games, self.stack), -1, dtype=np.int64)
            self.last_stack = obs.new_zeros(obs.shape)
        if 2 * self.stack * games > self.num_frames - self.horizon:  # one insert must not overwrite itself
            raise ValueError(f"{games} games' frames do not fit a frame ring of {self.num_frames}")
        self.inserted += games
        stored: Any = slice(None)
        index = np.arange(games)
        if not self.final_obs:  # a time-limited transition without its last observation is not stored
            ended = np.asarray(torch.as_tensor(truncated).cpu(), dtype=bool)
            ended &= ~np.asarray(torch.as_tensor(terminated).cpu(), dtype=bool)
            if ended.any():
                index = np.flatnonzero(~ended)
                stored = torch.from_numpy(index).to(self.device)
                if index.size == 0:
                    return
        floor = self.written - self.horizon  # frames older than this are not shared
        refs = [self._store(stacks[stored], index, floor) for stacks in (obs, next_obs)]
        # Every frame of these transitions is at least `floor`: the ring keeps it until it has
        # written frame `floor + num_frames`.
        expires = np.full(index.size, floor + self.num_frames, dtype=np.int64)
        values = [torch.from_numpy(v).to(self.device) for v in (*refs, expires)]
        fields = (action, reward, terminated)
        values[2:2] = [
            as_tensor(v, store.dtype)[stored] for v, store in zip(fields, (self.actions, self.rewards, self.terminated))
        ]
        stores = [getattr(self, name) for name in _FIELDS]
        self.position, count = write_ring(stores, values, self.position, self.capacity)
        self.size = min(self.size + count, self.capacity)
        self.stored += count
        self._drop_expired()

    def _drop_expired(self) -> None:
        """Drop the oldest transitions whose frames the ring may have overwritten (their expiry
        grows with insertion order, so they are the oldest ones)."""
        tail = (self.position - self.size) % self.capacity
        if self.size == 0 or int(self.expires[tail]) >= self.written:
            return
        pieces = (
            self.expires[tail : min(tail + self.size, self.capacity)],
            self.expires[: max(tail + self.size - self.capacity, 0)],
        )
        mark = torch.tensor([self.written], device=self.device)
        self.size -= sum(int(torch.searchsorted(piece, mark).item()) for piece in pieces)

    def _rows(self, draws: torch.Tensor) -> torch.Tensor:
        return (self.position - self.size + draws) % self.capacity

    def _stacks(self, refs: torch.Tensor) -> torch.Tensor:
        return self.frames[refs % self.num_frames]

    def sample(self) -> Batched:
        rows = self.batch_size if self.inserted >= self.learning_starts and self.size else 0
        draws = torch.randint(self.size or 1, (rows, self.num_batches), generator=self.generator, device=self.device)
        return self._batch(self._rows(draws))

    def transitions(self) -> ReplayBatch:
        """Every live transition, oldest first (a copy: for tests and inspection)."""
        return self._batch(self._rows(torch.arange(self.size, device=self.device)))

    def _batch(self, index: torch.Tensor) -> ReplayBatch:
        """The transitions at ring rows ``index``, their stacks gathered from the frames."""
        return ReplayBatch(
            self._stacks(self.obs_ref[index]),
            self.actions[index],
            self.rewards[index],
            self._stacks(self.next_ref[index]),
            self.terminated[index],
        )

    def state_dict(self) -> dict[str, Any]:
        """The live transitions (oldest first) and the frames they refer to, not the whole ring."""
        index = self._rows(torch.arange(self.size, device=self.device))
        oldest = max(self.written - self.num_frames, 0)
        if self.size:
            oldest = max(oldest, int(torch.minimum(self.obs_ref[index].min(), self.next_ref[index].min())))
        serials = torch.arange(oldest, self.written, device=self.device)
        state = {name: getattr(self, name)[index].clone() for name in _FIELDS}
        state.update(
            frames=self.frames[serials % self.num_frames].clone(),
            first_frame=oldest,
            written=self.written,
            last=torch.from_numpy(self.last.copy()),
            size=self.size,
            inserted=self.inserted,
            stored=self.stored,
            generator=self.generator.get_state(),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint holds {n} transitions, more than this buffer's capacity {self.capacity}")
        first, written = int(state["first_frame"]), int(state["written"])
        if written - first > self.num_frames:
            raise ValueError(f"checkpoint holds {written - first} frames, more than this buffer's {self.num_frames}")
        serials = torch.arange(first, written, device=self.device)
        self.frames[serials % self.num_frames] = state["frames"].to(self.device, self.frames.dtype)
        for name in _FIELDS:
            getattr(self, name)[:n] = state[name].to(self.device)
        self.written, self.position, self.size = written, n % self.capacity, n
        self.inserted, self.stored = int(state["inserted"]), int(state["stored"])
        # A game's last stack is shared only if its frames came back with the checkpoint.
        last = state["last"].cpu().numpy().astype(np.int64)
        self.last = np.where(last[:, :1] >= first, last, -1)
        self.last_stack = self.frames[torch.from_numpy(self.last.clip(min=0) % self.num_frames).to(self.device)]
        load_generator_state(self.generator, state["generator"])
