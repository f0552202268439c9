"""Checkpoint state of a component's torch objects, named once instead of written out per class."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import torch
from torch import nn

PHILOX_STATE_BYTES = 16
"""The size of a CUDA (Philox) generator's ``get_state()``: its seed and offset, 8 bytes each."""


@functools.cache
def _cpu_state_bytes() -> int:
    """The size of a CPU (Mersenne Twister) generator's ``get_state()`` in this torch (5056 in 2.x)."""
    return torch.Generator().get_state().numel()


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
            raise TypeError(f"save_state: {name} is a {type(value).__name__}, not a module, optimizer, generator, tensor or number")
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


def load_generator_state(generator: torch.Generator, state: Any) -> None:
    """Restore ``generator`` from a saved ``get_state()``, also one saved on another kind of device.

    A CUDA generator's state (16 bytes: seed and offset) cannot be set into a CPU generator
    (5056 bytes of Mersenne Twister), nor the reverse.  That happens whenever a state crosses
    devices: a run trained on a GPU evaluated or loaded in a CPU process (``msrl eval``, the final
    evaluation, ``msrl.load``), or resumed on a machine of the other kind.  The generator is then
    seeded from a hash of the saved state: deterministic (the same checkpoint always gives the same
    stream), and a different stream for every saved state.  The draws differ from those the saving
    device would have made next, which no other device can reproduce anyway.  A state of the
    generator's own kind is restored exactly; one of no known kind is refused (``ValueError``).
    """
    state = torch.as_tensor(state).detach().cpu()
    if state.dtype != torch.uint8 or state.dim() != 1:
        raise ValueError(f"a generator state is a 1-D uint8 tensor, got {state.dtype} of shape {tuple(state.shape)}")
    own = generator.get_state().numel()
    if state.numel() == own:
        generator.set_state(state)
    elif state.numel() in (PHILOX_STATE_BYTES, _cpu_state_bytes()):
        generator.manual_seed(_seed_of(state))
    else:
        raise ValueError(f"a {generator.device.type} generator's state has {own} bytes, got {state.numel()} "
                         f"(neither a CPU's {_cpu_state_bytes()} nor a CUDA generator's {PHILOX_STATE_BYTES})")


def _seed_of(state: torch.Tensor) -> int:
    """A 63-bit seed derived from a generator state's bytes."""
    digest = hashlib.sha256(state.contiguous().numpy().tobytes()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def copy_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of ``module``'s state, what a learner's ``get_weights`` hands to actors."""
    return {key: value.detach().clone() for key, value in module.state_dict().items()}
