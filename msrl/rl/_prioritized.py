"""Prioritized experience replay (Schaul et al., 2016), proportional variant: a transition is
sampled with probability ``p_i^alpha / sum_k p_k^alpha``, its priority ``p_i`` the magnitude of its
last TD error (plus ``epsilon``), new transitions entering at the largest priority seen so far; the
learner weights each sampled transition's loss by ``(N * P(i))^-beta / max_j w_j`` (importance
sampling), ``beta`` annealed to 1 over the run.

The sums live in a ``SumTree`` whose updates and searches are vectorised over a whole batch:
one tensor operation per tree level, no Python loop over transitions.  ``Prioritized`` adds this
sampling to a ring replay whose rows are the tree's leaves: ``PrioritizedReplayBuffer`` (whole
observations) and ``PrioritizedFrameReplayBuffer`` (stacked frames stored once each)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from msrl.core import Batched, NoValue
from msrl.rl._frame_replay import FrameReplayBuffer
from msrl.rl._replay import ReplayBatch, ReplayBuffer


class SumTree:
    """Non-negative values at ``capacity`` leaves and the sums of every subtree, in one float64
    array (the root at 1, node ``n``'s children at ``2n`` and ``2n + 1``, leaves from ``size`` on).
    It lives in NumPy on the CPU whatever the replay's device: its operations are on a batch's
    worth of indices, where NumPy's per-call cost is a fraction of torch's."""

    def __init__(self, capacity: int) -> None:
        self.size = 1 << max(0, (capacity - 1).bit_length())  # leaves: a power of two
        self.depth = self.size.bit_length() - 1
        self.capacity = capacity
        self.tree = np.zeros(2 * self.size, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def values(self, indices: Any) -> np.ndarray:
        return self.tree[np.asarray(indices, dtype=np.int64) + self.size]

    def update(self, indices: Any, values: Any) -> None:
        """Set the leaves ``indices`` to ``values`` (the last one wins where an index repeats) and
        every sum above them."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if indices.size == 0:
            return
        # the last occurrence of each index: the first in the reversed order
        unique, first = np.unique(indices[::-1], return_index=True)
        nodes = unique + self.size
        tree = self.tree
        tree[nodes] = values[::-1][first]
        level = self.depth  # the level of ``nodes``; the root's is 0
        while level > 0 and (1 << (level - 1)) > nodes.size:  # parents written once per child:
            nodes = nodes >> 1  # repeats write the same sum
            children = nodes << 1
            tree.put(nodes, tree.take(children) + tree.take(children + 1))
            level -= 1
        for parents in range(level - 1, -1, -1):  # levels no wider than the batch: each one whole
            start = 1 << parents
            np.add(tree[2 * start : 4 * start : 2], tree[2 * start + 1 : 4 * start : 2], out=tree[start : 2 * start])

    def find(self, prefix: Any) -> np.ndarray:
        """For each prefix sum in ``[0, total)``, the leaf whose span of the cumulative sum holds it;
        never a leaf of value 0 while the total is positive.  Rounding in the sums can leave a
        value at or past the sum of the subtree it is in, and the walk then goes on into an empty
        subtree, to a row that holds no transition (its importance weight infinite): those few
        walk again, going right only into subtrees whose sum is positive."""
        prefix = np.asarray(prefix, dtype=np.float64).reshape(-1)
        node = self._descend(prefix.copy(), guarded=False)
        empty = self.tree[node] == 0
        if empty.any() and self.total > 0:
            node[empty] = self._descend(prefix[empty], guarded=True)
        return np.minimum(node - self.size, self.capacity - 1)

    def _descend(self, value: np.ndarray, guarded: bool) -> np.ndarray:
        """The leaf nodes the prefix sums ``value`` (consumed) walk down to from the root."""
        node = np.ones(value.shape, dtype=np.int64)
        for _ in range(self.depth):
            node <<= 1
            left = self.tree[node]
            right = value >= left
            if guarded:
                right &= self.tree[node + 1] > 0
            value -= left * right
            node += right
        return node


class PrioritizedBatch(NamedTuple):
    """A ``ReplayBatch`` with each transition's importance-sampling weight, ``(batch_size, num_batches)``."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    weights: torch.Tensor

    @property
    def num_batches(self) -> int:
        return self.rewards.shape[1]

    def minibatch(self, k: int) -> PrioritizedBatch:
        """The transitions of gradient step ``k``, and their weights."""
        return PrioritizedBatch(*(field[:, k] for field in self))


class Prioritized:
    """Proportional prioritized sampling (module docstring) for the ring replay it is mixed into,
    which stores transitions at rows ``0 ... capacity - 1`` (the tree's leaves), reports each write
    to ``rows_written`` and each row it lets go to ``forget``, gathers rows with ``_batch`` and
    checkpoints its live rows in ``_state_rows`` order.  ``sample()`` returns a
    ``PrioritizedBatch``, and ``update_priorities(td_errors)`` takes the learner's TD errors of the
    batch it sampled last, shaped as its rewards.  ``beta_steps``: the insertions over which
    ``beta`` anneals to 1 (this copy's share of the run's env steps)."""

    capacity: int
    size: int
    inserted: int
    batch_size: int
    num_batches: int
    learning_starts: int
    device: torch.device
    generator: torch.Generator
    _batch: Callable[[torch.Tensor], ReplayBatch]  # the transitions at rows ``index``
    _state_rows: Callable[[], torch.Tensor]  # the live rows, in the order ``state_dict`` saves them in

    def __init__(
        self,
        *args: Any,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
        beta_steps: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.alpha, self.beta, self.epsilon, self.beta_steps = alpha, beta, epsilon, max(1, beta_steps)
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0
        self.sampled = torch.zeros((0, self.num_batches), dtype=torch.int64, device=self.device)

    def rows_written(self, start: int, count: int, td_errors: torch.Tensor | None = None) -> None:
        """New transitions enter at the largest priority so far, or with the actor's TD errors
        (``|td| + epsilon``) where it sent them; a ring that wrapped keeps the last ``count`` rows."""
        rows = (start + np.arange(count)) % self.capacity
        if td_errors is None:
            self.tree.update(rows, np.full(count, self.max_priority**self.alpha))
            return
        priorities = np.abs(td_errors.detach().cpu().numpy().astype(np.float64))[-count:] + self.epsilon
        self.tree.update(rows, priorities**self.alpha)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def forget(self, start: int, count: int) -> None:
        """Rows ``start ...`` (mod the capacity) no longer hold transitions: never sampled again."""
        self.tree.update((start + np.arange(count)) % self.capacity, np.zeros(count))

    @property
    def current_beta(self) -> float:
        return self.beta + (1.0 - self.beta) * min(1.0, self.inserted / self.beta_steps)

    def sample(self) -> Batched:
        rows = self.batch_size if self.inserted >= self.learning_starts and self.size else 0
        count = rows * self.num_batches
        total = self.tree.total
        # one draw in each of count equal slices of the cumulative priority (stratified, as the paper's)
        offsets = torch.rand(count, generator=self.generator, dtype=torch.float64).numpy()
        prefix = np.minimum((np.arange(count) + offsets) * (total / max(count, 1)), total * (1 - 1e-12))
        leaves = self.tree.find(prefix)
        weights = (self.size * self.tree.values(leaves) / total) ** -self.current_beta if count else np.ones(0)
        if count:
            weights /= weights.max()
        index = torch.from_numpy(leaves.reshape(rows, self.num_batches)).to(self.device)
        self.sampled = index
        weights_tensor = torch.from_numpy(weights.reshape(rows, self.num_batches)).to(self.device, torch.float32)
        return PrioritizedBatch(*self._batch(index), weights_tensor)

    def update_priorities(self, td_errors: Any) -> NoValue:
        """New priorities for the transitions ``sample()`` returned last: ``|td_errors| + epsilon``."""
        priorities = np.abs(torch.as_tensor(td_errors).detach().cpu().numpy().astype(np.float64)) + self.epsilon
        if priorities.size == 0:
            return
        if priorities.shape != tuple(self.sampled.shape):
            raise ValueError(f"{priorities.shape} TD errors for a batch of {tuple(self.sampled.shape)}")
        self.tree.update(self.sampled.cpu().numpy(), priorities**self.alpha)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = super().state_dict()  # type: ignore[misc]
        state.update(
            priorities=torch.from_numpy(self.tree.values(self._state_rows().cpu().numpy()).copy()),
            max_priority=self.max_priority,
            sampled=self.sampled.clone(),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)  # type: ignore[misc]
        self.tree.tree[:] = 0.0
        self.tree.update(self._state_rows().cpu().numpy(), torch.as_tensor(state["priorities"]).numpy())
        self.max_priority = float(state["max_priority"])
        self.sampled = state["sampled"].to(self.device)

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """The transitions dealt out as the replay deals them, each at the largest priority any
        replica held (the old rings' priorities are not carried over)."""
        super().load_regrouped(states, replica, count)  # type: ignore[misc]
        self.max_priority = max(float(state.get("max_priority", 1.0)) for state in states)
        self.tree.tree[:] = 0.0
        self.rows_written(0, self.size)


class PrioritizedReplayBuffer(Prioritized, ReplayBuffer):
    """``ReplayBuffer`` sampled in proportion to priorities (``Prioritized``)."""


class PrioritizedFrameReplayBuffer(Prioritized, FrameReplayBuffer):
    """``FrameReplayBuffer`` (stacked frames stored once each) sampled in proportion to priorities
    (``Prioritized``): the rows it drops for their frames leave the tree."""
