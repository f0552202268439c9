"""Checkpoint state of a component's torch objects, named once instead of written out per class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from msrl.core import load_generator_state


def save_state(owner: Any, *names: str) -> dict[str, Any]:
    """``owner``'s attributes ``names`` as checkpoint state: modules, optimizers and whatever else
    has a ``state_dict()`` (running statistics) by it, generators by their state, numbers as they are."""
    state: dict[str, Any] = {}
    for name in names:
        value = getattr(owner, name)
        if callable(getattr(value, "state_dict", None)):
            state[name] = value.state_dict()
        elif isinstance(value, torch.Generator):
            state[name] = value.get_state()
        elif isinstance(value, torch.Tensor):
            state[name] = value.detach().clone()
        elif isinstance(value, (int, float)):
            state[name] = value
        else:
            raise TypeError(
                f"save_state: {name} is a {type(value).__name__}: no state_dict(), not a generator, tensor or number"
            )
    return state


def load_state(owner: Any, state: dict[str, Any], *names: str) -> None:
    """The inverse of ``save_state``: restores ``names`` in place from ``state``."""
    for name in names:
        value = getattr(owner, name)
        if callable(getattr(value, "load_state_dict", None)):
            value.load_state_dict(state[name])
        elif isinstance(value, torch.Generator):
            load_generator_state(value, state[name])
        elif isinstance(value, torch.Tensor):
            with torch.no_grad():
                value.copy_(state[name])
        else:
            setattr(owner, name, type(value)(state[name]))


def copy_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of ``module``'s state, what a learner's ``get_weights`` hands to actors."""
    return {key: value.detach().clone() for key, value in module.state_dict().items()}


@torch.no_grad()
def load_weights(module: nn.Module, weights: Mapping[str, Any]) -> None:
    """``module.load_state_dict(weights)``, as an actor takes a learner's weights every iteration:
    one in-place copy of all the tensors (``torch._foreach_copy_``) where ``weights`` holds exactly
    the module's keys, as tensors of its shapes.  ``load_state_dict`` walks every submodule in
    Python, which costs several times the copy itself (0.3 ms for PPO's 64-unit actor-critic on the
    2-core VM); whatever it would refuse (other keys, other shapes) still goes to it, for its error."""
    targets = module.state_dict(keep_vars=True)
    if targets.keys() != weights.keys() or not all(
        isinstance(value, torch.Tensor) and value.shape == targets[key].shape for key, value in weights.items()
    ):
        module.load_state_dict(weights)
        return
    torch._foreach_copy_([target.detach() for target in targets.values()], [weights[key] for key in targets])
