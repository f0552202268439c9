"""What crosses an interface, without a transport: ``route``/``sources``/``combine``
and the batch splitting behind them, per interface op.  The fragment programs and
presets on the PPO graph are in test_fragment_programs.py."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch

from fragments import (
    PER_ITERATION,
    PER_STEP,
    Interface,
    combine,
    concat_batched,
    route,
    sources,
    split_batched,
)
from msrl.core import InterfaceOp, ValueKind, ValueRef

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml"


class Step(NamedTuple):
    obs: torch.Tensor
    reward: torch.Tensor


def interface(
    op: str | InterfaceOp, index: int = 0, node: str = "env.step", kind: str | ValueKind = ValueKind.BATCHED
) -> Interface:
    return Interface(ValueRef(node, index), "src", "dst", op, PER_STEP, kind)


def assert_same(actual, expected) -> None:
    """Structural equality for tensors, arrays, (named) tuples and dicts, types included."""
    assert type(actual) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        assert torch.equal(actual, expected)
    elif isinstance(expected, np.ndarray):
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        np.testing.assert_array_equal(actual, expected)
    elif isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    else:
        assert actual == expected


def leaves(value) -> list:
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in leaves(item)]
    return [value]


# -- gather -----------------------------------------------------------------------------------------
def test_gather_of_three_replicas_concatenates_in_replica_order():
    gather = [interface("gather")]
    sent = {src: (torch.full((2, 3), float(src)),) for src in range(3)}
    routed = {src: route(sent[src], gather, src_replica=src, dst_replicas=1) for src in range(3)}
    # Every source replica sends to the single destination replica, and only to it.
    assert all(list(payloads) == [0] for payloads in routed.values())
    order = sources(gather, dst_replica=0, src_replicas=3)
    assert order == [0, 1, 2]
    # Deliveries may arrive in any order; combine follows the order of ``sources``.
    (joined,) = combine([routed[src][0] for src in order], gather)
    assert joined.shape == (6, 3)
    assert joined[:, 0].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


def test_gather_concatenates_every_carried_output_and_leaves_the_rest_none():
    # A destination that receives outputs 0 and 2 of a 3-output node from 2 replicas.
    gather = [interface("gather", 0), interface("gather", 2)]
    values = [(np.arange(2) + 10 * r, f"not carried {r}", {"done": np.array([r, r])}) for r in range(2)]
    parts = [route(value, gather, src_replica=r, dst_replicas=1)[0] for r, value in enumerate(values)]
    assert parts[1][1] is None
    obs, skipped, info = combine(parts, gather)
    np.testing.assert_array_equal(obs, [0, 1, 10, 11])
    assert skipped is None
    np.testing.assert_array_equal(info["done"], [0, 0, 1, 1])


def test_single_source_gather_arrives_whole():
    gather = [interface("gather")]
    value = (torch.arange(4),)
    part = route(value, gather, 0, 1)[0]
    assert sources(gather, 0, 1) == [0]
    assert combine([part], gather)[0] is value[0]


# -- scatter ----------------------------------------------------------------------------------------
ROUND_TRIP = {
    "tensor": torch.arange(24, dtype=torch.float32).reshape(6, 4),
    "ndarray": np.arange(12, dtype=np.int64).reshape(6, 2),
    "namedtuple": Step(obs=torch.randn(6, 4), reward=torch.arange(6.0)),
    "dict": {
        "obs": np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32),
        "mask": torch.tensor([1, 0, 1, 1, 0, 1]),
    },
}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_scatter_then_gather_round_trips(name):
    value = ROUND_TRIP[name]
    scatter, gather = [interface("scatter")], [interface("gather")]
    payloads = route((value,), scatter, src_replica=0, dst_replicas=3)
    assert sorted(payloads) == [0, 1, 2]
    # Each replica gets an equal share of the batch, of the same type as the whole.
    for payload in payloads.values():
        (part,) = payload
        assert type(part) is type(value)
        assert [len(leaf) for leaf in leaves(part)] == [2] * len(leaves(value))
    # Each destination replica sends its share back; the gather restores the original.
    back = [route(payloads[r], gather, src_replica=r, dst_replicas=1)[0] for r in sources(gather, 0, 3)]
    (joined,) = combine(back, gather)
    assert_same(joined, value)


def test_scatter_parts_are_ordered_slices():
    parts = split_batched(np.arange(6), 3)
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    step = Step(obs=torch.arange(4.0), reward=torch.arange(4.0) * 10)
    halves = split_batched(step, 2)
    assert all(type(h) is Step for h in halves)
    assert halves[1].obs.tolist() == [2.0, 3.0] and halves[1].reward.tolist() == [20.0, 30.0]


def test_scatter_parts_are_copies_not_views():
    array, tensor = np.arange(8.0), torch.arange(8.0)
    for part in split_batched(array, 2):
        assert not np.shares_memory(part, array)
    for part in split_batched(tensor, 2):
        assert part.untyped_storage().data_ptr() != tensor.untyped_storage().data_ptr()
        assert part.untyped_storage().nbytes() == part.numel() * part.element_size()


@pytest.mark.parametrize(
    "value",
    [
        torch.zeros(7, 2),
        np.zeros(5),
        Step(obs=torch.zeros(4, 2), reward=torch.zeros(5)),
        {"a": np.zeros(6), "b": np.zeros(7)},
    ],
    ids=["tensor", "ndarray", "namedtuple", "dict"],
)
def test_scatter_of_an_indivisible_batch_raises(value):
    with pytest.raises(ValueError, match=r"cannot be split evenly across 3 replicas"):
        route((value,), [interface("scatter")], src_replica=0, dst_replicas=3)


def test_split_and_concat_reject_unknown_types_by_name():
    with pytest.raises(TypeError, match="cannot split a batched list"):
        split_batched([1, 2], 2)
    with pytest.raises(TypeError, match="cannot gather a batched int"):
        concat_batched([1, 2])


# -- broadcast and p2p ------------------------------------------------------------------------------
def test_broadcast_gives_every_replica_the_same_object():
    weights = {"pi": torch.randn(3, 3)}
    broadcast = [interface("broadcast", node="learner.get_weights", kind=ValueKind.GLOBAL)]
    payloads = route((weights,), broadcast, src_replica=0, dst_replicas=4)
    assert sorted(payloads) == [0, 1, 2, 3]
    assert all(payload[0] is weights for payload in payloads.values())
    for replica in range(4):
        assert sources(broadcast, replica, 1) == [0]
        assert combine([payloads[replica]], broadcast)[0] is weights


def test_p2p_goes_to_the_same_replica_index():
    p2p = [interface("p2p")]
    value = (np.arange(4),)
    payloads = route(value, p2p, src_replica=2, dst_replicas=3)
    assert list(payloads) == [2]
    assert payloads[2][0] is value[0]
    assert [sources(p2p, replica, 3) for replica in range(3)] == [[0], [1], [2]]


def test_uncarried_outputs_are_none_in_the_payload():
    value = (torch.ones(2), torch.zeros(2), np.ones(2), "info")
    payloads = route(value, [interface("p2p", index=1)], src_replica=0, dst_replicas=1)
    assert list(payloads) == [0]
    assert len(payloads[0]) == 4
    assert payloads[0][0] is None and payloads[0][2] is None and payloads[0][3] is None
    assert payloads[0][1] is value[1]
    # Two scattered outputs of a four-output node: the other two stay None in every part.
    split = route(value, [interface("scatter", 0), interface("scatter", 2)], src_replica=0, dst_replicas=2)
    for _replica, payload in split.items():
        assert payload[1] is None and payload[3] is None
        assert payload[0].shape == (1,) and payload[2].shape == (1,)


def test_allreduce_interface_carries_no_values():
    with pytest.raises(ValueError, match="only an allreduce carries no value"):
        interface("allreduce")  # an allreduce with a value is refused where it is made
    allreduce = Interface(None, "src", "src", InterfaceOp.ALL_REDUCE, PER_ITERATION, ValueKind.GLOBAL)
    with pytest.raises(ValueError, match="'allreduce' does not carry values"):
        route((torch.ones(2),), [allreduce], src_replica=0, dst_replicas=2)
    with pytest.raises(ValueError, match="carries no dataflow value"):
        _ = allreduce.ref


def test_unknown_interface_op_is_refused_where_it_is_made():
    with pytest.raises(ValueError, match=r"unknown interface op 'gahter'; valid choices: p2p, gather, scatter"):
        interface("gahter")
    assert interface("gather").op is InterfaceOp.GATHER  # a config's string becomes the member
