"""The two pieces of PPO's update that PPO, IMPALA and MAPPO share: the clipped surrogate policy
loss, and the loop of epochs over shuffled minibatches.  Plain torch, for a researcher to read and
change in one place."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar, cast

import torch

Rows = TypeVar("Rows", bound=tuple[torch.Tensor, ...] | Mapping[str, torch.Tensor])
"""A batch whose tensors share their leading (row) axis: a (named) tuple of tensors, or a flat
``name -> tensor`` mapping (MAPPO's per-group batches)."""


def clipped_surrogate(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, clip_coef: float
) -> torch.Tensor:
    """PPO's clipped surrogate objective as a loss (Schulman et al., 2017, eq. 7, negated):
    ``mean(max(-A * r, -A * clamp(r, 1 - clip_coef, 1 + clip_coef)))`` with the probability ratio
    ``r = exp(logprobs - old_logprobs)``.  Advantages are used as given: normalising them is the
    caller's choice."""
    ratio = (logprobs - old_logprobs).exp()
    return torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()


def ppo_epochs(data: Rows, epochs: int, num_minibatches: int, generator: torch.Generator) -> Iterator[Rows]:
    """``epochs`` passes over ``data``, each in a fresh random row order cut into ``num_minibatches``
    equal minibatches of the same structure as ``data``.

    The order is drawn with ``generator`` on its device (where the learner's data is: on a GPU a
    CPU permutation and its copy would run every epoch), one ``randperm`` per epoch even when
    there is one minibatch, so a learner's stream does not depend on its minibatch count.  Rows
    are gathered once per epoch and cut once per epoch: minibatches are views of the shuffled copy.
    """
    tensors = list(data.values()) if isinstance(data, Mapping) else list(data)
    if not tensors:
        raise ValueError("ppo_epochs needs at least one tensor")
    rows = tensors[0].shape[0]
    if any(t.shape[0] != rows for t in tensors):
        raise ValueError(f"ppo_epochs: tensors of {sorted({t.shape[0] for t in tensors})} rows; they must share rows")
    if num_minibatches < 1 or rows % num_minibatches:
        raise ValueError(f"ppo_epochs: {num_minibatches} minibatches do not divide {rows} rows")
    size = rows // num_minibatches
    for _ in range(epochs):
        order = torch.randperm(rows, generator=generator, device=generator.device)
        columns = [t[order].split(size) for t in tensors]
        for parts in zip(*columns):
            yield _rebuild(data, parts)


def _rebuild(data: Rows, parts: tuple[torch.Tensor, ...]) -> Rows:
    """``parts`` (one tensor per tensor of ``data``, in order) in ``data``'s structure (mapping,
    named tuple, tuple)."""
    if isinstance(data, Mapping):
        return cast(Rows, dict(zip(data.keys(), parts)))
    if hasattr(data, "_fields"):  # a NamedTuple: rebuilt by field
        return cast(Rows, type(data)(*parts))
    return cast(Rows, tuple(parts))
