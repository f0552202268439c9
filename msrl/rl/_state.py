"""Checkpoint state of a component's torch objects, named once instead of written out per class."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from msrl.core import load_generator_state


def save_state(owner: Any, *names: str) -> dict[str, Any]:
    """``owner``'s attributes ``names`` as checkpoint state: modules and optimizers by their
    ``state_dict()``, generators by their state, numbers as they are."""
    state: dict[str, Any] = {}
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, (nn.Module, torch.optim.Optimizer)):
            state[name] = value.state_dict()
        elif isinstance(value, torch.Generator):
            state[name] = value.get_state()
        elif isinstance(value, torch.Tensor):
            state[name] = value.detach().clone()
        elif isinstance(value, (int, float)):
            state[name] = value
        else:
            raise TypeError(
                f"save_state: {name} is a {type(value).__name__}, not a module, optimizer, generator, tensor or number"
            )
    return state


def load_state(owner: Any, state: dict[str, Any], *names: str) -> None:
    """The inverse of ``save_state``: restores ``names`` in place from ``state``."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, (nn.Module, torch.optim.Optimizer)):
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
