"""The torch array backend: tensors on any device, without host syncs in a step.

Action values are checked only with ``validate=True`` (reading a device value
syncs).  On an accelerator finished environments are handled with masks over
the whole batch (finding their indices would need their count, a sync); on the
CPU that "sync" is free, so there they are found by index like NumPy.  The
state is stored column by column for the CPU kernels' sake (see
``_columns_contiguous``), or by rows for CUDA C kernels (``columns=False``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import numpy as np
import torch

from msrl.core import CheckpointError, ConfigError, load_generator_state
from msrl.envs._arrays import ArrayBackend


class TorchRNG:
    """A ``torch.Generator`` on the backend's device; its ``get_state()`` (a CPU
    uint8 tensor, also for CUDA generators) is the checkpoint."""

    def __init__(self, seed: int, device: torch.device) -> None:
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(int(seed))

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(int(seed))

    def state_dict(self) -> torch.Tensor:
        return self.generator.get_state().clone()

    def load_state_dict(self, state: Any) -> None:
        """Also a state saved on the other kind of device (``msrl.core.load_generator_state``)."""
        try:
            load_generator_state(self.generator, state)
        except (TypeError, RuntimeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint has an unusable torch generator state: {exc}") from None


_FLOAT_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    torch.float32: torch.float32,
    torch.float64: torch.float64,
}
_TORCH_KINDS = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "bool": torch.bool}
_UNSIGNED = {torch.uint8, *(getattr(torch, f"uint{bits}", None) for bits in (16, 32, 64))}


def _columns_contiguous(state: torch.Tensor) -> torch.Tensor:
    """A fresh ``(num_envs, state_dim)`` copy of ``state``, stored column by column.

    A step works on one state variable at a time (``theta = state[:, 2]``); with
    each column contiguous those are plain vectors, which torch's CPU kernels
    vectorise: at 4,096 envs ``cos`` of a column takes 8.6 us instead of 13.7 us
    strided, a multiplication 2 us instead of 5.  Elementwise results keep the
    layout of their inputs, so a step that starts from this layout keeps it.
    """
    return state.t().clone(memory_format=torch.contiguous_format).t()


class TorchActions:
    """How ``TorchArrays`` reads and checks actions (their dtype kind, range, finiteness), apart
    from the array operations of a step."""

    dtype: torch.dtype

    def kind(self, array: torch.Tensor) -> str:
        dtype = array.dtype
        if dtype == torch.bool:
            return "b"
        if dtype.is_floating_point:
            return "f"
        if dtype.is_complex:
            return "c"
        return "u" if dtype in _UNSIGNED else "i"

    def discrete_ok(self, action: torch.Tensor, kind: str, n: int) -> bool:
        ok = (action >= 0) & (action < n)
        if kind == "f":
            ok &= action == action.trunc()
        return bool(ok.all())

    def all_finite(self, action: torch.Tensor) -> bool:
        return bool(torch.isfinite(action).all())

    def value_range(self, action: torch.Tensor) -> str:
        return f"[{action.min().item()}, {action.max().item()}]"

    def index_action(self, action: torch.Tensor) -> torch.Tensor:
        return action if action.dtype in (torch.int64, torch.int32) else action.to(torch.int64)

    def float_action(self, action: torch.Tensor) -> torch.Tensor:
        """float32 and float64 are kept (float64 only when the state is float64), so a
        float64 env given float32 actions rounds the torque terms like the NumPy backend."""
        dtype = action.dtype
        if dtype == torch.float32 or (dtype == torch.float64 and self.dtype == torch.float64):
            return action
        return action.to(self.dtype)


class TorchArrays(TorchActions, ArrayBackend):
    """Tensors on ``device``; the state is ``dtype`` (float32 or float64).

    ``validate=True`` also checks action values, which costs a device-to-host
    sync per step (``.item()``) and is therefore off by default; shapes (host
    metadata) are always checked.  ``sparse`` finds finished environments by
    index (the default on the CPU) or by mask (elsewhere); ``columns`` stores
    the state column by column (kernels need ``columns=False``).

    ``step`` runs under ``torch.inference_mode``, which takes about a
    microsecond of dispatch off every op (a sixth of a CPU step at 4,096 envs);
    outputs are allocated outside it, so observations, rewards and flags are
    ordinary tensors that autograd may save.
    """

    name = "torch"

    def __init__(
        self,
        device: str | torch.device | None = "cpu",
        dtype: Any = torch.float32,
        validate: bool = False,
        columns: bool = True,
        sparse: bool | None = None,
    ) -> None:
        if dtype not in _FLOAT_DTYPES:
            raise ConfigError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        self.device = torch.device("cpu" if device is None else device)
        self.dtype = _FLOAT_DTYPES[dtype]
        self.validate = bool(validate)
        self.columns = bool(columns)
        self.sparse = self.device.type == "cpu" if sparse is None else bool(sparse)

    def _torch(self, kind: str) -> torch.dtype:
        return self.dtype if kind == "real" else _TORCH_KINDS[kind]

    def zeros(self, shape: tuple[int, ...], kind: str) -> torch.Tensor:
        return torch.zeros(shape, dtype=self._torch(kind), device=self.device)

    def asarray(self, value: Any) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value if value.device == self.device else value.to(self.device)
        return torch.as_tensor(np.asarray(value), device=self.device)

    def convert(self, value: Any, kind: str) -> torch.Tensor:
        tensor = self.asarray(value).to(self._torch(kind))
        return tensor.clone(memory_format=torch.contiguous_format)

    def contiguous(self, value: torch.Tensor, kind: str) -> torch.Tensor:
        return value.to(self._torch(kind)).contiguous()

    def own_state(self, state: torch.Tensor) -> torch.Tensor:
        state = state.to(self.dtype)
        return _columns_contiguous(state) if self.columns else state.clone(memory_format=torch.contiguous_format)

    def copy(self, array: torch.Tensor) -> torch.Tensor:
        return array.clone()

    def to_tensor(self, array: torch.Tensor) -> torch.Tensor:
        return array.detach().cpu().clone()

    def where(self, mask: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        return torch.where(mask, a, b)

    def scalar(self, value: float | int, kind: str) -> torch.Tensor:
        return torch.tensor(value, dtype=self._torch(kind), device=self.device)

    def host_floats(self, *values: Any) -> list[float]:
        return torch.stack([torch.as_tensor(v, device=self.device).double() for v in values]).tolist()

    def empty(self, shape: tuple[int, ...], kind: str) -> torch.Tensor:
        return torch.empty(shape, dtype=self._torch(kind), device=self.device)

    def obs_buffer(self, num_envs: int, obs_shape: tuple[int, ...]) -> torch.Tensor:
        if self.columns and len(obs_shape) == 1:
            # column by column like the state, so filling it is a plain copy (a
            # transposing copy costs 30 us at 4,096 envs)
            return torch.empty_strided((num_envs, obs_shape[0]), (1, num_envs), dtype=torch.float32, device=self.device)
        return torch.empty((num_envs, *obs_shape), dtype=torch.float32, device=self.device)

    def stepping(self) -> ContextManager[Any]:
        return torch.inference_mode()

    def truncate(
        self, lengths: torch.Tensor, last_step: Any, terminated: torch.Tensor, truncated: torch.Tensor
    ) -> torch.Tensor | None:
        # flags stay float32 0/1 throughout: a bool-to-float conversion costs as much as a comparison
        torch.ge(lengths, last_step, out=truncated)
        return self.finished_rows(terminated, truncated)

    def finished_rows(self, terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor | None:
        done = terminated + truncated  # 0, 1 or 2
        if not self.sparse:
            return done.bool()
        rows = done.nonzero().view(-1)
        return rows if rows.numel() else None

    def fill_rows(self, array: torch.Tensor, rows: torch.Tensor, value: float | int) -> None:
        if self.sparse:
            array.index_fill_(0, rows, value)
        else:
            array.masked_fill_(_per_row(rows, array), value)

    def fill_mask(self, array: torch.Tensor, mask: torch.Tensor, value: float | int) -> None:
        array.masked_fill_(mask, value)

    def copy_rows(self, dst: torch.Tensor, src: torch.Tensor, rows: torch.Tensor) -> None:
        if self.sparse:
            dst.index_copy_(0, rows, src.index_select(0, rows))
        else:
            torch.where(_per_row(rows, dst), src, dst, out=dst)

    def copy_where(self, dst: torch.Tensor, src: torch.Tensor, mask: torch.Tensor) -> None:
        torch.where(mask, src, dst, out=dst)

    def reset_rows(self, state: torch.Tensor, rows: torch.Tensor, draw: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """By index on the CPU, where drawing and blending a whole batch of states would be
        most of a step's cost; on an accelerator fresh states are drawn for *every*
        environment and blended in with ``torch.where`` (drawing only where needed
        would need the count, i.e. a sync).  Either way the draws depend only on
        the seed and the episodes, so runs are reproducible."""
        if self.sparse:
            return state.index_copy_(0, rows, draw(rows.numel()))
        return torch.where(rows.unsqueeze(1), draw(state.shape[0]), state, out=state)  # keeps state's layout

    def new_rng(self, seed: int) -> TorchRNG:
        return TorchRNG(seed, self.device)


def _per_row(mask: torch.Tensor, array: torch.Tensor) -> torch.Tensor:
    """A per-environment ``(num_envs,)`` mask shaped to select whole rows of ``array``."""
    return mask.view(mask.shape + (1,) * (array.dim() - mask.dim()))


__all__ = ["TorchArrays", "TorchRNG"]
