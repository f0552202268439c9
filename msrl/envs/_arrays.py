"""Array backends: the few array operations the shared environment code needs.

``BatchedEnv`` (action checks, episode tracking, time limit, autoreset,
``set_state``, checkpoints) is written once against this small interface; an
``ArrayBackend`` says how each operation is done in its memory:

* ``NumpyArrays``: host arrays.  Every check is free here (no device to sync
  with), so action values are always validated and finished environments are
  found by index and touched one by one.
* ``TorchArrays``: tensors on any torch device.  Nothing in a step copies to
  the host: action values are checked only with ``validate=True``, and on an
  accelerator finished environments are handled with masks over the whole
  batch instead of indices (finding indices would need their count, a sync).
  On the CPU that "sync" is free, so there it works by index like NumPy.

Each backend also owns the random generator its physics draws from (the state
a checkpoint stores), and how a step's outputs are laid out.  The torch
backend stores the state column by column (``columns=True``, see
``TorchArrays.own_state``) because torch's CPU kernels vectorise contiguous
columns; CUDA C kernels want rows, so the kernel backends pass
``columns=False``.

Checkpoint values are torch tensors and plain Python values only (never NumPy
arrays), so ``torch.load(weights_only=True)`` reads them.  The two backends
live in ``_numpy_arrays`` and ``_torch_arrays``; ``BatchedEnv`` picks one by
name from ``msrl.envs._base.ARRAY_BACKENDS``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import Any, ClassVar

import torch

Array = Any
"""A NumPy array or a torch tensor, whichever the backend holds."""

Rows = Any
"""Which environments finished a step: int64 indices on host-indexed backends
(``sparse``), a bool mask over the batch otherwise; ``None`` when a
host-indexed backend knows that none did."""

_NULL_CONTEXT = contextlib.nullcontext()


class ArrayBackend:
    """The array operations of the shared environment code, for one kind of memory.

    ``kinds`` name dtypes without naming a library: ``"real"`` (the state's
    floating type), ``"float32"``, ``"float64"``, ``"int64"``, ``"bool"``.
    """

    name: ClassVar[str]
    validate: bool
    """Check action *values* (not only shapes) in every step."""
    sparse: bool
    """Finished environments are found as host indices (else as device masks)."""
    dtype: Any
    device: Any

    # -- memory ------------------------------------------------------------------
    def zeros(self, shape: tuple[int, ...], kind: str) -> Array:
        raise NotImplementedError

    def asarray(self, value: Any) -> Array:
        """``value`` (NumPy array, tensor, list) in this backend's memory, dtype unchanged."""
        raise NotImplementedError

    def convert(self, value: Any, kind: str) -> Array:
        """A fresh C-contiguous copy of ``value`` as ``kind``."""
        raise NotImplementedError

    def contiguous(self, value: Array, kind: str) -> Array:
        """``value`` as a C-contiguous ``kind`` array, copied only if it is not one already."""
        raise NotImplementedError

    def own_state(self, state: Array) -> Array:
        """``state`` (already ``real``) in the layout the environment keeps it in, never
        aliasing an array the caller still holds."""
        raise NotImplementedError

    def copy(self, array: Array) -> Array:
        raise NotImplementedError

    def to_tensor(self, array: Array) -> torch.Tensor:
        """A CPU tensor copy, for checkpoints."""
        raise NotImplementedError

    def where(self, mask: Array, a: Any, b: Any) -> Array:
        raise NotImplementedError

    def scalar(self, value: float | int, kind: str) -> Any:
        """A number the backend's arrays combine with cheaply (a 0-d device tensor for torch)."""
        raise NotImplementedError

    def host_floats(self, *values: Any) -> list[float]:
        """``values`` (backend scalars) as Python floats, with one device sync at most."""
        raise NotImplementedError

    # -- a step ----------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], kind: str) -> Array:
        raise NotImplementedError

    def obs_buffer(self, num_envs: int, obs_shape: tuple[int, ...]) -> Array:
        """Room for a batch of float32 observations."""
        return self.empty((num_envs, *obs_shape), "float32")

    def step_outputs(self, num_envs: int, obs_shape: tuple[int, ...]) -> tuple[Array, Array, Array, Array]:
        """Fresh float32 ``(obs, reward, terminated, truncated)`` for one step to fill."""
        return (
            self.obs_buffer(num_envs, obs_shape),
            self.empty((num_envs,), "float32"),
            self.empty((num_envs,), "float32"),
            self.empty((num_envs,), "float32"),
        )

    def stepping(self) -> ContextManager[Any]:
        """The context a step runs in."""
        return _NULL_CONTEXT

    def truncate(self, lengths: Array, last_step: Any, terminated: Array, truncated: Array) -> Rows:
        """The time limit: write ``truncated = lengths >= last_step`` (float32 0/1) and
        return the rows that finished, by either flag."""
        raise NotImplementedError

    def finished_rows(self, terminated: Array, truncated: Array) -> Rows:
        raise NotImplementedError

    def fill_rows(self, array: Array, rows: Rows, value: float | int) -> None:
        raise NotImplementedError

    def fill_mask(self, array: Array, mask: Array, value: float | int) -> None:
        raise NotImplementedError

    def copy_rows(self, dst: Array, src: Array, rows: Rows) -> None:
        """``dst[rows] = src[rows]``, in place."""
        raise NotImplementedError

    def copy_where(self, dst: Array, src: Array, mask: Array) -> None:
        """``dst[mask] = src[mask]`` for a bool ``mask``, in place."""
        raise NotImplementedError

    def reset_rows(self, state: Array, rows: Rows, draw: Callable[[int], Array]) -> Array:
        """``state`` with the finished ``rows`` (not None) replaced by ``draw(n)`` fresh states."""
        raise NotImplementedError

    def new_rng(self, seed: int) -> Any:
        """The generator host physics draws from (``.generator``, ``reseed``, checkpoints)."""
        raise NotImplementedError

    # -- actions -------------------------------------------------------------------
    def kind(self, array: Array) -> str:
        """NumPy's dtype kind letter: ``b``ool, ``i``nt, ``u``nsigned, ``f``loat, other."""
        raise NotImplementedError

    def discrete_ok(self, action: Array, kind: str, n: int) -> bool:
        """Every value is an integer in ``[0, n)``."""
        raise NotImplementedError

    def all_finite(self, action: Array) -> bool:
        raise NotImplementedError

    def value_range(self, action: Array) -> str:
        raise NotImplementedError

    def index_action(self, action: Array) -> Array:
        """A discrete action as host physics indexes with it."""
        raise NotImplementedError

    def float_action(self, action: Array) -> Array:
        """A continuous action as host physics computes with it."""
        raise NotImplementedError
