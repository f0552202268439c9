"""A uniform replay buffer component for off-policy algorithms (DQN, SAC)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from msrl.core import Batched, Buffer, ConfigError, NoValue, component_class
from msrl.rl._nstep import NStepReturns
from msrl.rl._state import load_generator_state


def available_memory() -> int | None:
    """Bytes of host memory the kernel says can be allocated now (``MemAvailable``), None where
    it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_fits(nbytes: int, what: str, device: str | torch.device = "cpu") -> None:
    """A ``ConfigError`` naming the bytes ``what`` needs where host memory cannot hold them (said
    before anything is allocated: a buffer filled over hours would end the run when it filled)."""
    if torch.device(device).type != "cpu":
        return
    free = available_memory()
    if free is not None and nbytes > free:
        raise ConfigError(
            f"{what} needs {nbytes / 2**30:,.1f} GiB and this machine has {free / 2**30:,.1f} GiB available: "
            "lower algo.buffer_size"
        )


def write_ring(stores: Any, values: Any, start: int, capacity: int) -> tuple[int, int]:
    """Write ``values[i]`` into ``stores[i]`` at rows ``start, start + 1, ...`` (mod ``capacity``),
    as at most two slices: one copy per field instead of an index tensor per field.  More rows than
    the ring holds leave the last ``capacity`` of them, as writing them all in order would.
    Returns the next row to write and the rows written."""
    count = values[0].shape[0]
    if count > capacity:
        values = [value[count - capacity :] for value in values]
        start, count = (start + count - capacity) % capacity, capacity
    first = min(count, capacity - start)
    for store, value in zip(stores, values):
        store[start : start + first] = value[:first]
        if count > first:
            store[: count - first] = value[first:]
    return (start + count) % capacity, count


def actor_td_errors(
    reward: torch.Tensor, terminated: torch.Tensor, q: torch.Tensor, next_value: torch.Tensor, discount: float
) -> torch.Tensor:
    """Each transition's TD error under the actor's network, ``r + discount V(s') - Q(s, a)``
    (Ape-X's initial priority); a terminated transition's target ignores ``next_value``, which may
    be unknown there."""
    return reward.to(torch.float32) + discount * torch.where(terminated > 0, 0.0, next_value) - q


class ReplayBatch(NamedTuple):
    """Sampled transitions, shaped ``(batch_size, num_batches, ...)``: row-major, so that when
    several buffer copies each sample their share of a batch, the learner's ``k``-th gradient step
    (``field[:, k]``) draws from all of them."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor

    @property
    def num_batches(self) -> int:
        return self.rewards.shape[1]

    def minibatch(self, k: int) -> ReplayBatch:
        """The transitions of gradient step ``k``."""
        return ReplayBatch(*(field[:, k] for field in self))


class ReplayBuffer(Buffer):
    """The last ``capacity`` transitions, sampled uniformly with replacement.

    ``insert`` takes one step of every environment.  With same-step autoreset the observation after
    an episode's end is the next episode's first, so a transition cut by a time limit (truncated and
    not terminated) is stored only with ``final_obs=True``, where ``next_obs`` is the environment's
    ``final_obs()`` (the episode's last observation), and only on rows where that is known (not
    NaN); it is stored with ``terminated`` 0, so its target bootstraps.  Otherwise it is not stored,
    rather than bootstrapped from the next episode's first state.  A terminated transition is
    stored; its target does not use ``next_obs``.

    ``sample()`` returns ``num_batches`` batches of ``batch_size`` transitions at once (one per
    gradient step of the learner's update), or zero rows while fewer than ``learning_starts``
    transitions have been inserted (the warm-up; counted before dropping time-limit transitions, so
    copies of a buffer that insert alike warm up on the same iteration and replicated learners
    keep stepping together).  Storage lives on ``device``, so sampling on a GPU
    learner's fragment never leaves the device.  ``obs_dtype`` (``msrl.rl.observation_dtype`` of
    the space): uint8 frames are stored as uint8 (a frame environment's ``final_obs`` is always
    known).
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
        obs_dtype: torch.dtype = torch.float32,
        n_step: int = 1,
        gamma: float = 0.99,
    ) -> None:
        if capacity < 1 or batch_size < 1 or num_batches < 1 or n_step < 1:
            raise ValueError(
                f"capacity, batch_size, num_batches and n_step must be >= 1, got {capacity}, {batch_size}, "
                f"{num_batches}, {n_step}"
            )
        row = 2 * math.prod(obs_shape) * obs_dtype.itemsize + math.prod(action_shape) * action_dtype.itemsize + 8
        check_fits(capacity * row, f"a replay buffer of {capacity:,} transitions", device)
        self.capacity, self.batch_size, self.num_batches = capacity, batch_size, num_batches
        self.learning_starts = max(learning_starts, 1)
        self.final_obs = final_obs
        self.device = torch.device(device)
        self.obs = torch.zeros((capacity,) + tuple(obs_shape), dtype=obs_dtype, device=self.device)
        self.next_obs = torch.zeros_like(self.obs)
        self.actions = torch.zeros((capacity,) + tuple(action_shape), dtype=action_dtype, device=self.device)
        self.rewards = torch.zeros(capacity, device=self.device)
        self.terminated = torch.zeros(capacity, device=self.device)
        self.position = 0  # next row written
        self.size = 0
        self.inserted = 0  # transitions offered to insert, stored or not
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        # n-step: each environment's steps wait in a window until they make an n-step transition
        self.n_step = NStepReturns(n_step, gamma, self.device) if n_step > 1 else None
        self.discount = gamma**n_step  # what bootstraps a stored transition

    def __len__(self) -> int:
        return self.size

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
        """Store one step of every environment.  With an actor's ``q`` (Q(obs, action)) and
        ``next_value`` (its value of ``next_obs``), each stored transition's TD error under the
        actor's network goes to ``rows_written`` (a prioritized replay's initial priorities, Ape-X's)."""
        as_tensor = lambda x, dtype=None: torch.as_tensor(x, device=self.device, dtype=dtype)  # noqa: E731
        terminated = as_tensor(terminated, torch.float32)
        cut = (as_tensor(truncated, torch.float32) > 0) & (terminated == 0)
        if self.final_obs and self.obs.dtype.is_floating_point:  # the last observation, or NaN where unknown
            next_obs = as_tensor(next_obs, torch.float32)
            known = torch.isfinite(next_obs.reshape(next_obs.shape[0], -1)).all(dim=1)
            cut &= ~known
            # a terminated row's target ignores next_obs, but NaN times 0 is NaN: store zeros there
            next_obs = torch.where(known.reshape((-1,) + (1,) * (next_obs.dim() - 1)), next_obs, 0.0)
        keep = ~cut
        offered, kept = keep.numel(), int(keep.sum())
        self.inserted += offered
        valued = q is not None and next_value is not None
        if valued:
            q, next_value = as_tensor(q, torch.float32), as_tensor(next_value, torch.float32)
        if self.n_step is not None:  # what the windows complete, each bootstrapped (or not) as it should be
            step = (obs, action, reward, next_obs, terminated, truncated)
            done = self.n_step.step(*(as_tensor(v) for v in step), *((q, next_value) if valued else ()))
            obs, action, reward, next_obs, terminated = done[:5]
            q, next_value, terminated = done.q, done.next_value, terminated.to(torch.float32)
            keep = torch.ones_like(terminated, dtype=torch.bool)
            offered = kept = int(terminated.numel())
        if kept == 0:
            return
        td_errors = None
        if valued:
            td_errors = actor_td_errors(as_tensor(reward), terminated, q, next_value, self.discount)[keep]
        stores = (self.obs, self.next_obs, self.actions, self.rewards, self.terminated)
        values = [as_tensor(v, store.dtype) for v, store in zip((obs, next_obs, action, reward), stores)]
        values.append(terminated)
        if kept < offered:
            values = [value[keep] for value in values]
        start = self.position
        self.position, count = write_ring(stores, values, self.position, self.capacity)
        self.size = min(self.size + count, self.capacity)
        self.rows_written(start, count, td_errors)

    def rows_written(self, start: int, count: int, td_errors: torch.Tensor | None = None) -> None:
        """Called after ``insert`` wrote ``count`` transitions from row ``start`` on (mod the
        capacity), with their TD errors under the actor's network where ``insert`` was given them."""

    def sample(self) -> Batched:
        rows = self.batch_size if self.inserted >= self.learning_starts and self.size else 0
        index = torch.randint(self.size or 1, (rows, self.num_batches), generator=self.generator, device=self.device)
        return self._batch(index)

    def _batch(self, index: torch.Tensor) -> ReplayBatch:
        """The transitions at rows ``index``."""
        return ReplayBatch(
            self.obs[index], self.actions[index], self.rewards[index], self.next_obs[index], self.terminated[index]
        )

    def _state_rows(self) -> torch.Tensor:
        """The live rows, in the order ``state_dict`` saves them in."""
        return torch.arange(self.size, device=self.device)

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        return {
            "obs": self.obs[:n].clone(),
            "next_obs": self.next_obs[:n].clone(),
            "actions": self.actions[:n].clone(),
            "rewards": self.rewards[:n].clone(),
            "terminated": self.terminated[:n].clone(),
            "position": self.position,
            "size": n,
            "inserted": self.inserted,
            "generator": self.generator.get_state(),
            **({"n_step": self.n_step.state_dict()} if self.n_step is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint holds {n} transitions, more than this buffer's capacity {self.capacity}")
        for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, name)[:n] = state[name].to(self.device)
        self.position, self.size, self.inserted = int(state["position"]), n, int(state["inserted"])
        load_generator_state(self.generator, state["generator"])
        if self.n_step is not None:
            self.n_step.load_state_dict(state.get("n_step", {}))

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """Deal the transitions of the checkpoint's replicas out to ``count`` new ones
        (``deal_transitions``); ``inserted`` (the warm-up's count) is the run's, shared out anew."""
        orders = []
        for state in states:
            n, position = int(state["size"]), int(state["position"])
            orders.append(torch.arange(n).roll(-position) if position < n else torch.arange(n))  # oldest first
        chosen, owner = deal_transitions(orders, replica, count, self.capacity)
        n = int(chosen.numel())
        for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
            store = getattr(self, name)
            for i in owner.unique().tolist():
                mine = owner == i
                target = mine.nonzero().squeeze(1)
                store[target.to(self.device)] = states[i][name][chosen[mine]].to(self.device, store.dtype)
        self.position, self.size = n % self.capacity, n
        self.inserted = sum(int(state["inserted"]) for state in states) // count
        if replica < len(states):
            load_generator_state(self.generator, states[replica]["generator"])


def deal_transitions(
    orders: Sequence[torch.Tensor], replica: int, count: int, capacity: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """How a replay's transitions are dealt out when its fragment goes from ``len(orders)`` replicas
    to ``count``: ``orders[i]`` are old replica ``i``'s rows, oldest first.  Where there are fewer
    replicas now, each takes those of the old replicas it replaces; where there are more, an old
    replica's transitions alternate between the new ones that replace it.  Each keeps its newest
    transitions up to ``capacity``, so what one replica held stays in one replica.  Returns new
    replica ``replica``'s rows, oldest first (ages interleaved across the old replicas, which insert
    alike), and the old replica each comes from."""
    old = len(orders)
    sources = [(i, 0, 1) for i in range(old) if i * count // old == replica] if old >= count else []
    if old < count:
        i = max(k for k in range(old) if k * count // old <= replica)
        first, last = i * count // old, (i + 1) * count // old
        sources = [(i, replica - first, last - first)]
    rows, ages, owners = [], [], []
    for i, offset, every in sources:
        n = int(orders[i].numel())
        age = torch.arange(n - 1, -1, -1)  # steps since insertion, newest 0
        keep = age % every == offset
        rows.append(orders[i][keep])
        ages.append(age[keep] * old + i)  # comparable across replicas that insert alike
        owners.append(torch.full((int(keep.sum()),), i))
    if not rows:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    sort = torch.argsort(torch.cat(ages), descending=True, stable=True)[-capacity:]
    return torch.cat(rows)[sort], torch.cat(owners)[sort]


def keeps_final_obs(env: Any, wanted: bool) -> bool:
    """Whether a replay buffer stores time-limited transitions with ``env.final_obs()``
    (``algo.bootstrap_time_limits``): ``wanted``, or a ``ConfigError`` where ``env`` cannot give it."""
    if wanted and not callable(getattr(component_class(env), "final_obs", None)):
        raise ConfigError(
            f"algo.bootstrap_time_limits needs an environment with final_obs(); "
            f"{type(env).__name__} has none: set it to false"
        )
    return wanted
