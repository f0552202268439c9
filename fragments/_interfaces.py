"""What each replica sends and receives across an interface, without any
transport: splitting a batched value for a scatter, joining the parts of a
gather.  The Ray transport in ``cluster`` moves the pieces; this module decides
what the pieces are, so the rules are tested without a cluster.

Ops (see ``fragments._partition``): ``p2p`` replica i -> replica i; ``gather``
every source replica -> the one destination, concatenated along the batch
axis; ``scatter`` the one source -> every destination, split along the batch
axis (the inverse of a gather of equal parts); ``broadcast`` the one source ->
every destination, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from fragments._fdg import Interface
from msrl.core import InterfaceOp

_Parts = Callable[[Any, int, int], Iterator[tuple[int, Any]]]
"""``(item, src_replica, dst_replicas) -> (destination replica, its part)`` for one output."""

_PARTS: dict[InterfaceOp, _Parts] = {
    InterfaceOp.P2P: lambda item, src, _: iter([(src, item)]),
    InterfaceOp.GATHER: lambda item, _src, _dst: iter([(0, item)]),
    InterfaceOp.BROADCAST: lambda item, _, dst: ((replica, item) for replica in range(dst)),
    InterfaceOp.SCATTER: lambda item, _, dst: enumerate(split_batched(item, dst)),
}
"""The dispatch table of ``route``: what each destination replica receives, per interface op."""


def route(value: tuple, interfaces: list[Interface], src_replica: int, dst_replicas: int) -> dict[int, tuple]:
    """Destination replica -> the payload it receives from ``value`` (a node's
    output tuple), for the interfaces of one destination fragment.  Outputs
    that no interface carries are ``None`` in the payload."""
    payloads: dict[int, list[Any]] = {}
    for interface in interfaces:
        parts = _PARTS.get(interface.op)
        if parts is None:
            raise ValueError(f"interface op {interface.op.value!r} does not carry values")
        index = interface.ref.index
        for replica, item in parts(value[index], src_replica, dst_replicas):
            payloads.setdefault(replica, [None] * len(value))[index] = item
    return {replica: tuple(items) for replica, items in payloads.items()}


def sources(interfaces: list[Interface], dst_replica: int, src_replicas: int) -> list[int]:
    """The source replicas a destination replica receives one node's outputs from."""
    ops = {interface.op for interface in interfaces}
    if InterfaceOp.GATHER in ops:
        return list(range(src_replicas))
    if InterfaceOp.P2P in ops:
        return [dst_replica]
    return [0]


def combine(parts: list[tuple], interfaces: list[Interface]) -> tuple:
    """Join the payloads received from ``sources``: a gather concatenates along
    the batch axis, in source-replica order; everything else arrives whole."""
    if len(parts) == 1:
        return parts[0]
    return tuple(
        concat_batched([part[i] for part in parts]) if parts[0][i] is not None else None for i in range(len(parts[0]))
    )


def split_batched(value: Any, parts: int) -> list[Any]:
    """Split every array in ``value`` into ``parts`` along axis 0 (copies, so a
    part never drags its neighbours' memory across the wire)."""
    if isinstance(value, torch.Tensor):
        _check_divisible(value.shape[0], parts)
        return [chunk.clone() for chunk in torch.tensor_split(value, parts)]
    if isinstance(value, np.ndarray):
        _check_divisible(value.shape[0], parts)
        return [chunk.copy() for chunk in np.array_split(value, parts)]
    if isinstance(value, tuple):
        columns = [split_batched(item, parts) for item in value]
        return [_same_tuple(value, [column[p] for column in columns]) for p in range(parts)]
    if isinstance(value, dict):
        by_key = {key: split_batched(item, parts) for key, item in value.items()}
        return [{key: column[p] for key, column in by_key.items()} for p in range(parts)]
    raise TypeError(
        f"cannot split a batched {type(value).__name__} across replicas; use tensors, arrays, tuples or dicts"
    )


def concat_batched(values: list[Any]) -> Any:
    """Concatenate per-replica batches along axis 0, recursing into tuples and dicts."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(values)
    if isinstance(first, np.ndarray):
        return np.concatenate(values)
    if isinstance(first, tuple):
        return _same_tuple(first, [concat_batched([v[i] for v in values]) for i in range(len(first))])
    if isinstance(first, dict):
        return {key: concat_batched([v[key] for v in values]) for key in first}
    raise TypeError(
        f"cannot gather a batched {type(first).__name__} from replicas; use tensors, arrays, tuples or dicts"
    )


def _same_tuple(template: tuple, items: list[Any]) -> tuple:
    return type(template)(*items) if hasattr(template, "_fields") else tuple(items)


def _check_divisible(size: int, parts: int) -> None:
    if size % parts:
        raise ValueError(f"a batch of {size} cannot be split evenly across {parts} replicas")
