"""Prioritized replay (``msrl.rl.PrioritizedReplayBuffer``): the sum tree against numpy's
cumulative sums, sampling in proportion to ``priority^alpha``, the importance weights' formula,
new transitions at the largest priority, and DQN's priorities flowing back from the learner to a
replay that lives in another fragment's replicas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fragments import PER_ITERATION
from msrl.app import load_config, plan
from msrl.core import ConfigError, ValueKind
from msrl.rl import PrioritizedBatch, PrioritizedReplayBuffer, SumTree

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("capacity", [1, 5, 8, 1000])
def test_the_sum_tree_finds_the_leaf_whose_span_holds_each_prefix_sum(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    values = rng.uniform(0.1, 2.0, capacity)
    tree = SumTree(capacity)
    tree.update(torch.arange(capacity), torch.as_tensor(values))
    assert tree.total == pytest.approx(values.sum())
    prefix = rng.uniform(0, values.sum(), 4096)
    expected = np.searchsorted(np.cumsum(values), prefix, side="right")  # the leaf whose span holds it
    assert np.array_equal(tree.find(prefix), expected)


def test_the_sum_tree_never_finds_an_empty_leaf_at_the_edges_of_empty_rows() -> None:
    """Rows that hold nothing (forgotten, never written) have value 0; prefix sums at and beside
    the cumulative sums' edges, where rounding in the tree's sums decides, still end on a leaf
    with a value, the one numpy's cumulative sum gives wherever that is not a rounding tie."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        capacity = int(rng.integers(4, 128))
        values = rng.random(capacity) * 10 ** rng.uniform(-3, 3, size=capacity)
        values[rng.random(capacity) < 0.4] = 0.0
        values[rng.integers(capacity)] = 1.0  # never all empty
        tree = SumTree(capacity)
        tree.update(np.arange(capacity), values)
        edges = np.cumsum(values)
        prefix = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf)])
        prefix = prefix[prefix < tree.total]
        assert (tree.values(tree.find(prefix)) > 0).all()
        inside = rng.uniform(0, tree.total, 256)
        inside = inside[np.abs(edges[:, None] - inside).min(axis=0) > 1e-9 * tree.total]  # no ties
        assert np.array_equal(tree.find(inside), np.searchsorted(edges, inside, side="right"))


def test_updates_set_leaves_and_every_sum_above_the_last_value_winning_where_an_index_repeats() -> None:
    tree = SumTree(6)
    tree.update(torch.arange(6), torch.ones(6))
    tree.update(torch.tensor([2, 4, 2]), torch.tensor([5.0, 0.5, 3.0]))
    assert tree.values(torch.arange(6)).tolist() == [1.0, 1.0, 3.0, 1.0, 0.5, 1.0]
    assert tree.total == pytest.approx(7.5)


@pytest.mark.parametrize("capacity", [1, 2, 7, 1000])
def test_every_sum_is_its_childrens_after_updates_of_any_size(capacity: int) -> None:
    """Batches smaller and larger than the tree's levels, with repeated rows: each leaf holds the
    last value written to it and each node exactly the sum of its two children."""
    rng = np.random.default_rng(capacity)
    tree, expected = SumTree(capacity), np.zeros(capacity)
    for count in [1, 3, capacity, 600, 5000, 2]:
        rows, values = rng.integers(0, capacity, count), rng.uniform(0.0, 3.0, count)
        tree.update(rows, values)
        for row, value in zip(rows, values):  # in order: the last write of a row wins
            expected[row] = value
        assert np.array_equal(tree.values(np.arange(capacity)), expected)
        parents = np.arange(1, tree.size)
        assert np.array_equal(tree.tree[parents], tree.tree[2 * parents] + tree.tree[2 * parents + 1])


def _buffer(capacity: int = 64, rows: int = 4096, **kwargs) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(capacity, (1,), batch_size=rows, seed=3, **kwargs)


def _fill(buffer: PrioritizedReplayBuffer, count: int) -> None:
    obs = torch.arange(count, dtype=torch.float32).reshape(count, 1)
    zeros = torch.zeros(count)
    buffer.insert(obs, torch.zeros(count, dtype=torch.int64), zeros, obs, zeros, zeros)


def test_transitions_are_sampled_in_proportion_to_their_priority_to_the_alpha() -> None:
    buffer = _buffer(capacity=4, rows=20_000, alpha=0.5)
    _fill(buffer, 4)
    batch = buffer.sample()
    buffer.update_priorities(torch.tensor([1.0, 4.0, 9.0, 16.0])[buffer.sampled])  # by the rows sampled
    counts = torch.bincount(buffer.sample().obs.reshape(-1).long(), minlength=4).double()
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0]) / 10  # sqrt of 1, 4, 9, 16 (plus epsilon)
    torch.testing.assert_close(counts / counts.sum(), expected.double(), atol=0.01, rtol=0)
    assert isinstance(batch, PrioritizedBatch) and batch.num_batches == 1


def test_the_importance_weights_are_n_times_p_to_the_minus_beta_over_their_largest() -> None:
    buffer = _buffer(capacity=4, rows=512, alpha=1.0, beta=0.5, beta_steps=10**9)
    _fill(buffer, 4)
    buffer.sample()
    buffer.update_priorities(torch.tensor([1.0, 2.0, 3.0, 4.0])[buffer.sampled] - buffer.epsilon)
    batch = buffer.sample()
    p = torch.tensor([1.0, 2.0, 3.0, 4.0]) / 10
    w = (4 * p) ** -0.5
    expected = w[batch.obs.reshape(-1).long()] / w[batch.obs.reshape(-1).long()].max()
    torch.testing.assert_close(batch.weights.reshape(-1), expected, rtol=1e-5, atol=1e-6)


def test_new_transitions_enter_at_the_largest_priority_and_beta_anneals_to_1() -> None:
    buffer = _buffer(capacity=8, rows=16, alpha=1.0, beta=0.4, beta_steps=8)
    _fill(buffer, 4)
    buffer.sample()
    buffer.update_priorities(torch.full(buffer.sampled.shape, 5.0))
    _fill(buffer, 2)
    assert buffer.tree.values(torch.tensor([4, 5])).tolist() == pytest.approx([5.0 + 1e-6] * 2)
    assert buffer.current_beta == pytest.approx(0.4 + 0.6 * 6 / 8)
    _fill(buffer, 4)
    assert buffer.current_beta == 1.0


def test_the_warm_up_samples_nothing_and_a_checkpoint_restores_the_priorities() -> None:
    buffer = _buffer(capacity=16, rows=8, learning_starts=10)
    _fill(buffer, 4)
    empty = buffer.sample()
    assert empty.rewards.shape == (0, 1) and empty.weights.shape == (0, 1)
    buffer.update_priorities(torch.zeros(0, 1))  # nothing to update
    _fill(buffer, 8)
    buffer.sample()
    buffer.update_priorities(torch.rand(buffer.sampled.shape, generator=torch.Generator().manual_seed(0)))
    again = _buffer(capacity=16, rows=8, learning_starts=10)
    again.load_state_dict(buffer.state_dict())
    assert np.array_equal(again.tree.tree, buffer.tree.tree) and again.max_priority == buffer.max_priority
    assert torch.equal(again.sample().obs, buffer.sample().obs)


def test_dqns_priorities_go_back_from_the_learner_to_the_replay_replicas_that_sampled_them() -> None:
    config = load_config(
        str(REPO / "configs" / "dqn_cartpole.yaml"),
        ["algo.prioritized_replay=true", "policy=single_learner_coarse", "algo.compile=false"],
    )
    interfaces = {(str(i.value), i.src, i.dst): (i.op, i.kind, i.frequency) for i in plan(config).fdg.interfaces}
    # the batch gathered from the rollouts' replicas, its TD errors scattered back to them in the same order
    assert interfaces[("%buffer.sample", "rollout", "learner")] == ("gather", ValueKind.BATCHED, PER_ITERATION)
    assert interfaces[("%learner.td_errors", "learner", "rollout")] == ("scatter", ValueKind.BATCHED, PER_ITERATION)


def test_a_replay_of_its_own_sharded_fragment_gets_each_shards_priorities_back() -> None:
    config = load_config(
        str(REPO / "configs" / "dqn_cartpole.yaml"),
        [
            "algo.prioritized_replay=true",
            "algo.compile=false",
            "policy={fragments: [{name: acting, components: [env, actor], replicas: 2},"
            " {name: replay, components: [buffer], replicas: 2}, {name: learn, components: [learner]}]}",
        ],
    )
    interfaces = {(str(i.value), i.src, i.dst): (i.op, i.kind, i.frequency) for i in plan(config).fdg.interfaces}
    # each acting replica feeds its own shard every step; the shards' batches are gathered and the
    # TD errors scattered back to the shard that sampled them
    assert interfaces[("%actor.act", "acting", "replay")] == ("p2p", ValueKind.BATCHED, "per_step")
    assert interfaces[("%buffer.sample", "replay", "learn")] == ("gather", ValueKind.BATCHED, PER_ITERATION)
    assert interfaces[("%learner.td_errors", "learn", "replay")] == ("scatter", ValueKind.BATCHED, PER_ITERATION)
    assert interfaces[("%learner.get_weights", "learn", "acting")][0] == "broadcast"


def test_an_asynchronous_policy_that_would_run_the_replay_ahead_of_its_priorities_is_one_line() -> None:
    config = load_config(
        str(REPO / "configs" / "dqn_cartpole.yaml"),
        ["algo.prioritized_replay=true", "policy=async_single_learner", "algo.compile=false"],
    )
    with pytest.raises(
        ConfigError, match=r"%learner\.td_errors \(batched, scatter\) every iteration, which needs the "
    ):
        plan(config)
    uniform = load_config(str(REPO / "configs" / "dqn_cartpole.yaml"), ["policy=async_single_learner"])
    assert plan(uniform).fdg.policy.mode == "async"  # without priorities nothing goes back but the weights
