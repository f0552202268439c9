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

With n-step returns (``n_step``) a transition is ``(obs_t, a_t, r_t + ... , obs_{t+n})``: a game's
observations and its next observations are two streams, each compared with its own last stack, and
an observation is first compared with the next observation stored ``n`` transitions of its game
earlier, which it is while the episode goes on: still about one new frame per transition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from msrl.core import Batched, Buffer, NoValue
from msrl.rl._nstep import NStepReturns
from msrl.rl._replay import ReplayBatch, actor_td_errors, check_fits, deal_transitions, write_ring
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
    ``n_step`` and ``gamma``: n-step returns, as ``ReplayBuffer`` stores them.
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
        n_step: int = 1,
        gamma: float = 0.99,
    ) -> None:
        if capacity < 1 or batch_size < 1 or num_batches < 1 or n_step < 1:
            raise ValueError(
                f"capacity, batch_size, num_batches and n_step must be >= 1, got {capacity}, {batch_size}, "
                f"{num_batches}, {n_step}"
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
        # Each stream's last stack's serials, per game (n-step: observations, then next observations)
        # and its frames, sized at the first insert.
        self.last = np.full((0, self.stack), -1, dtype=np.int64)
        self.last_stack = self.frames[:0, None]
        self.n_step = NStepReturns(n_step, gamma, self.device) if n_step > 1 else None
        self.discount = gamma**n_step  # what bootstraps a stored transition
        self.streams = 2 if self.n_step is not None else 1
        # n-step: each game's next observations' serials over its last n transitions, and its count
        self.history = np.full((0, n_step, self.stack), -1, dtype=np.int64)
        self.emitted = np.zeros(0, dtype=np.int64)
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

    def _share(self, stack: torch.Tensor, tracker: int, floor: int, earlier: np.ndarray | None = None) -> np.ndarray:
        """The serials of ``stack``, writing only the frames it does not share with ``earlier`` (a
        stack stored before, tried first) or with the last stack of ``tracker`` (one game's stream).

        Plain indexing row by row: a batch holds a few games' stacks, and a vectorised gather costs
        more than the comparisons themselves at that size."""
        s, num_frames = self.stack, self.num_frames
        floor = max(floor, 0)
        last, previous = self.last[tracker], self.last_stack[tracker]
        known = last[0] >= floor
        if earlier is not None and earlier[0] >= floor and torch.equal(self._stacks(torch.from_numpy(earlier)), stack):
            refs = earlier.copy()
        elif known and torch.equal(previous, stack):
            return last.copy()
        elif known and torch.equal(previous[1:], stack[:-1]):
            refs = np.append(last[1:], self.written)
            self.frames[self.written % num_frames].copy_(stack[-1])
            self.written += 1
        else:
            refs = np.arange(self.written, self.written + s)
            for k in range(s):
                self.frames[(self.written + k) % num_frames].copy_(stack[k])
            self.written += s
        self.last[tracker] = refs
        previous.copy_(stack)
        return refs

    def _store(self, obs: torch.Tensor, next_obs: torch.Tensor, games: np.ndarray, floor: int) -> list[np.ndarray]:
        """Store each transition's stacks (``games``: the game of each row): their serials,
        ``(rows, stack)`` for the observations and for the next observations."""
        refs = [np.empty((len(games), self.stack), dtype=np.int64) for _ in range(2)]
        count = self.last.shape[0] // self.streams  # games
        for row, game in enumerate(games.tolist()):
            if self.n_step is None:  # one stream: this observation is mostly the last next one
                refs[0][row] = self._share(obs[row], game, floor)
                refs[1][row] = self._share(next_obs[row], game, floor)
                continue
            slot = self.emitted[game] % self.n_step.n  # the next observation of n transitions back
            refs[0][row] = self._share(obs[row], game, floor, self.history[game, slot])
            refs[1][row] = self.history[game, slot] = self._share(next_obs[row], count + game, floor)
            self.emitted[game] += 1
        return refs

    def insert(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
        q: Any = None,
        next_value: Any = None,
    ) -> NoValue:
        """Store one step of every game, as ``ReplayBuffer.insert`` does (with an actor's ``q`` and
        ``next_value``, each stored transition's TD error goes to ``rows_written``)."""
        as_tensor = lambda x, dtype=None: torch.as_tensor(x, device=self.device, dtype=dtype)  # noqa: E731
        obs, next_obs = as_tensor(obs, self.frames.dtype), as_tensor(next_obs, self.frames.dtype)
        games = obs.shape[0]
        if self.last.shape[0] != self.streams * games:
            if self.last.shape[0]:
                held = self.last.shape[0] // self.streams
                raise ValueError(f"this buffer holds {held} games' frames; insert gave {games}")
            self.last = np.full((self.streams * games, self.stack), -1, dtype=np.int64)
            self.last_stack = obs.new_zeros((self.streams * games, *obs.shape[1:]))
            self.history = np.full((games, self.history.shape[1], self.stack), -1, dtype=np.int64)
            self.emitted = np.zeros(games, dtype=np.int64)
        rows_at_most = games * (self.n_step.n if self.n_step is not None else 1)
        if 2 * self.stack * rows_at_most > self.num_frames - self.horizon:  # one insert must not overwrite itself
            raise ValueError(f"{games} games' frames do not fit a frame ring of {self.num_frames}")
        self.inserted += games
        terminated = as_tensor(terminated, torch.float32)
        valued = q is not None and next_value is not None
        if valued:
            q, next_value = as_tensor(q, torch.float32), as_tensor(next_value, torch.float32)
        index = np.arange(games)
        if self.n_step is not None:  # what the windows complete (a window cut by a time limit is dropped)
            step = (obs, as_tensor(action), as_tensor(reward), next_obs, terminated, as_tensor(truncated))
            done = self.n_step.step(*step, *((q, next_value) if valued else ()))
            obs, action, reward, next_obs, terminated = done[:5]
            q, next_value, terminated = done.q, done.next_value, terminated.to(torch.float32)
            index = done.envs.cpu().numpy()
        elif not self.final_obs:  # a time-limited transition without its last observation is not stored
            ended = np.asarray(torch.as_tensor(truncated).cpu(), dtype=bool)
            ended &= ~np.asarray(terminated.cpu(), dtype=bool)
            if ended.any():
                index = np.flatnonzero(~ended)
                kept = torch.from_numpy(index).to(self.device)
                obs, next_obs, terminated = obs[kept], next_obs[kept], terminated[kept]
                action, reward = as_tensor(action)[kept], as_tensor(reward)[kept]
                q, next_value = (q[kept], next_value[kept]) if valued else (q, next_value)
        if index.size == 0:
            return
        td_errors = actor_td_errors(as_tensor(reward), terminated, q, next_value, self.discount) if valued else None
        floor = self.written - self.horizon  # frames older than this are not shared
        refs = self._store(obs, next_obs, index, floor)
        # Every frame of these transitions is at least `floor`: the ring keeps it until it has
        # written frame `floor + num_frames`.
        expires = np.full(index.size, floor + self.num_frames, dtype=np.int64)
        values = [torch.from_numpy(v).to(self.device) for v in (*refs, expires)]
        fields = (action, reward, terminated)
        values[2:2] = [
            as_tensor(v, store.dtype) for v, store in zip(fields, (self.actions, self.rewards, self.terminated))
        ]
        stores = [getattr(self, name) for name in _FIELDS]
        start = self.position
        self.position, count = write_ring(stores, values, self.position, self.capacity)
        self.size = min(self.size + count, self.capacity)
        self.stored += count
        self.rows_written(start, count, td_errors)
        self._drop_expired()

    def rows_written(self, start: int, count: int, td_errors: torch.Tensor | None = None) -> None:
        """Called after ``insert`` wrote ``count`` transitions from row ``start`` on (mod the
        capacity), with their TD errors under the actor's network where ``insert`` was given them."""

    def forget(self, start: int, count: int) -> None:
        """Called when rows ``start ...`` (mod the capacity) are dropped for their frames."""

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
        dropped = sum(int(torch.searchsorted(piece, mark).item()) for piece in pieces)
        self.size -= dropped
        self.forget(tail, dropped)

    def _rows(self, draws: torch.Tensor) -> torch.Tensor:
        return (self.position - self.size + draws) % self.capacity

    def _state_rows(self) -> torch.Tensor:
        """The live rows, oldest first: the order ``state_dict`` saves them in."""
        return self._rows(torch.arange(self.size, device=self.device))

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
            position=self.position,
            generator=self.generator.get_state(),
        )
        if self.n_step is not None:
            state.update(
                n_step=self.n_step.state_dict(),
                history=torch.from_numpy(self.history.copy()),
                emitted=torch.from_numpy(self.emitted.copy()),
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
        # at the rows they held (a prioritized replay's draws depend on the rows' order)
        self.position, self.size = int(state.get("position", n)) % self.capacity, n
        rows = self._state_rows()
        for name in _FIELDS:
            getattr(self, name)[rows] = state[name].to(self.device)
        self.written = written
        self.inserted, self.stored = int(state["inserted"]), int(state["stored"])
        load_generator_state(self.generator, state["generator"])
        if self.n_step is not None:
            self.n_step.load_state_dict(state.get("n_step", {}))
        if ("history" in state) != (self.n_step is not None):  # saved with other streams: share afresh
            self.last, self.last_stack = self.last[:0], self.last_stack[:0]
            self.history, self.emitted = self.history[:0], self.emitted[:0]
            return
        # A stack is shared only if its frames came back with the checkpoint.
        last = state["last"].cpu().numpy().astype(np.int64)
        self.last = np.where(last[:, :1] >= first, last, -1)
        self.last_stack = self.frames[torch.from_numpy(self.last.clip(min=0) % self.num_frames).to(self.device)]
        if self.n_step is not None:
            history = state["history"].cpu().numpy().astype(np.int64)
            self.history = np.where(history[..., :1] >= first, history, -1)
            self.emitted = state["emitted"].cpu().numpy().astype(np.int64)

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """Deal the transitions of the checkpoint's replicas out to ``count`` new ones as
        ``ReplayBuffer`` deals them (``deal_transitions``), with the frames they refer to: each old
        replica's frames from the oldest one its dealt transitions use, one after another in the new
        ring.  Where they would not all fit, the oldest transitions go.  Each game's stacks are shared
        afresh, and n-step windows start empty, as the environments do."""
        orders = [torch.arange(int(state["size"])) for state in states]  # saved oldest first
        chosen, owner = deal_transitions(orders, replica, count, self.capacity)
        refs = {i: torch.stack([states[i]["obs_ref"], states[i]["next_ref"]], 1) for i in owner.unique().tolist()}
        while True:  # the frames each old replica's dealt transitions use, laid one segment after another
            spans = {}
            for i in refs:
                mine = chosen[owner == i]
                if mine.numel():
                    used = refs[i][mine]
                    spans[i] = (int(used.min()), int(states[i]["written"]))
            total = sum(end - start for start, end in spans.values())
            if total <= self.num_frames - self.horizon or chosen.numel() == 0:
                break
            drop = max(1, chosen.numel() // 64)  # the oldest go until the rest fit
            chosen, owner = chosen[drop:], owner[drop:]
        base, serial = 0, {}
        for i, (start, end) in spans.items():
            first = int(states[i]["first_frame"])
            frames = states[i]["frames"][start - first : end - first].to(self.device, self.frames.dtype)
            self.frames[torch.arange(base, base + end - start, device=self.device) % self.num_frames] = frames
            serial[i] = base - start  # old serial + this = new serial
            base += end - start
        n = int(chosen.numel())
        fields: dict[str, list[torch.Tensor]] = {name: [] for name in _FIELDS[:-1]}  # all but expires
        for i in serial:
            mine = owner == i
            for name in ("obs_ref", "next_ref"):
                fields[name].append(states[i][name][chosen[mine]] + serial[i])
            for name in ("actions", "rewards", "terminated"):
                fields[name].append(states[i][name][chosen[mine]])
        order = (
            torch.cat([(owner == i).nonzero().squeeze(1) for i in serial]) if n else torch.zeros(0, dtype=torch.int64)
        )
        self.written, self.position, self.size = base, n % self.capacity, n
        for name in fields:
            if n:  # gathered old replica by old replica, each to its row in the dealt order
                getattr(self, name)[order.to(self.device)] = torch.cat(fields[name]).to(self.device)
        # A transition's frames stay until the ring writes past its oldest one; expiries must rise
        # with the rows, so each row takes the least of its own and the later rows' bounds.
        if n:
            oldest = torch.minimum(self.obs_ref[:n, 0], self.next_ref[:n, 0]) + self.num_frames
            self.expires[:n] = oldest.flip(0).cummin(0).values.flip(0)
        self.inserted = sum(int(state["inserted"]) for state in states) // count
        self.stored = n
        self.last, self.last_stack = self.last[:0], self.last_stack[:0]
        self.history, self.emitted = self.history[:0], self.emitted[:0]
        if self.n_step is not None:
            self.n_step.load_state_dict({})
        if replica < len(states):
            load_generator_state(self.generator, states[replica]["generator"])
