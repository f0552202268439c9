"""Restoring a ``torch.Generator`` from a saved state, also one saved on another kind of device:
used by every component that checkpoints a generator (``msrl.rl``'s blocks, the algorithms, the
torch environment backend), so it lives at the bottom of the stack."""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a state is loaded: ``import msrl`` stays free of torch
    import torch

PHILOX_STATE_BYTES = 16
"""The size of a CUDA (Philox) generator's ``get_state()``: its seed and offset, 8 bytes each."""


@functools.cache
def _cpu_state_bytes() -> int:
    """The size of a CPU (Mersenne Twister) generator's ``get_state()`` in this torch (5056 in 2.x)."""
    import torch

    return torch.Generator().get_state().numel()


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
    import torch

    state = torch.as_tensor(state).detach().cpu()
    if state.dtype != torch.uint8 or state.dim() != 1:
        raise ValueError(f"a generator state is a 1-D uint8 tensor, got {state.dtype} of shape {tuple(state.shape)}")
    own = generator.get_state().numel()
    if state.numel() == own:
        generator.set_state(state)
    elif state.numel() in (PHILOX_STATE_BYTES, _cpu_state_bytes()):
        generator.manual_seed(_seed_of(state))
    else:
        raise ValueError(
            f"a {generator.device.type} generator's state has {own} bytes, got {state.numel()} "
            f"(neither a CPU's {_cpu_state_bytes()} nor a CUDA generator's {PHILOX_STATE_BYTES})"
        )


def _seed_of(state: torch.Tensor) -> int:
    """A 63-bit seed derived from a generator state's bytes."""
    digest = hashlib.sha256(state.contiguous().numpy().tobytes()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
