"""The one rule for what may cross a cut edge, and its check.

A value that leaves its fragment is flat: any transport (Ray object refs, a
socket, a collective, a compiled channel, CUDA IPC) can then carry it as a
list of buffers with a fixed layout, and a receiver never walks an unknown
tree.  Each output of a node that crosses a cut edge must be one of:

* a leaf: a ``torch.Tensor``, a ``numpy.ndarray`` or a number (``int``,
  ``float``, ``bool`` or a NumPy scalar);
* a tuple or ``NamedTuple`` of leaves (``(obs, reward, terminated, truncated)``);
* a flat mapping from ``str`` to leaves (a ``state_dict``, a metrics dict).

No nesting beyond that: a dict inside a dict, a dict inside a tuple or a list
anywhere is refused, with the path to the first offending part.  Flatten the
value where it is made (prefix the inner keys: ``{"obs_stats.mean": ...}``).

It is checked on the first send of each node, where the real value exists
(tracing sees proxies, not values), and the error names the node, the
fragment and the path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from numbers import Number
from typing import Any

import numpy as np
import torch

from msrl.core import MsrlError

FLAT_RULE = (
    "a tensor, an array or a number; a tuple or NamedTuple of those; or a flat str -> tensor/array/number "
    "mapping such as a state_dict (no nested dicts or lists)"
)


class CutEdgeError(MsrlError):
    """A value crossing a cut edge between fragments is not flat (see ``FLAT_RULE``)."""


def is_leaf(value: Any) -> bool:
    """A tensor, an array or a number (NumPy scalars and bools included)."""
    return isinstance(value, (torch.Tensor, np.ndarray, np.generic, Number))


def flat_violation(value: Any) -> str | None:
    """The path (``[1]['weights']``) and type of the first part of ``value`` that breaks the rule,
    or ``None`` when ``value`` is flat."""
    if is_leaf(value):
        return None
    if isinstance(value, tuple):
        for index, item in enumerate(value):
            if not is_leaf(item):
                return f"[{index}] ({_describe(item)})"
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r} (a {type(key).__name__}, not a str)"
            if not is_leaf(item):
                return f"[{key!r}] ({_describe(item)})"
        return None
    return f" ({_describe(value)})"


def check_flat(outputs: tuple, indices: Iterable[int], node: str, fragment: str) -> None:
    """Raise a one-line ``CutEdgeError`` unless the outputs ``indices`` of ``node`` (those its
    interfaces carry, out of its output tuple ``outputs``) are flat."""
    for index in sorted(set(indices)):
        path = flat_violation(outputs[index])
        if path is not None:
            raise CutEdgeError(
                f"node {node} of fragment {fragment} sends a value that is not flat at output {index}{path}; "
                f"what crosses a cut edge must be {FLAT_RULE}"
            )


def _describe(value: Any) -> str:
    kind = type(value).__name__
    return f"a nested {kind}" if isinstance(value, (tuple, list, Mapping)) else f"a {kind}"
