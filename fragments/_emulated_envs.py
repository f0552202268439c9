"""CPU twins of the CUDA environments: the same kernels and the same host code
(``fragments._kernel_envs``), with NumPy arrays as device memory and launches
run by the CPU emulation of ``fragments._cuda_emulation``.

They exist so that the CUDA backends' kernels and bookkeeping are tested on
machines without a GPU: with ``dtype=np.float64`` they must match the NumPy
backends bit for bit (``msrl.envs.consistency``), and with ``np.float32``
they run exactly the arithmetic the GPU build runs (up to the GPU's own
sin/cos and FMA rounding).

Example::

    env = msrl.envs.make("CartPole-v1", num_envs=8, backend="cuda-emulated", dtype=np.float64)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fragments._cuda_emulation import EmulatedModule, emulated_module
from fragments._kernel_envs import CartPoleKernelMixin, KernelEnv
from msrl._errors import ConfigError, EnvError
from msrl.envs._episodes import EpisodeTracker
from msrl.envs.cartpole import CartPoleParams
from msrl.envs.pendulum import PendulumParams

_KINDS = {"float32": np.float32, "int32": np.int32, "int64": np.int64}


def _real_dtype(dtype: Any) -> np.dtype:
    if isinstance(dtype, torch.dtype):
        dtype = {torch.float32: np.float32, torch.float64: np.float64}.get(dtype, dtype)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ConfigError(f"dtype must be float32 or float64, got {dtype!r}")
    return dt


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class NumpyKernelEnv(KernelEnv):
    """The array hooks of ``KernelEnv`` on NumPy, launches through the emulation."""

    _module: EmulatedModule

    def _init_numpy(self, num_envs: int, seed: int, dtype: Any, threads_per_block: int, defines: dict) -> None:
        self.dtype = _real_dtype(dtype)
        real = "double" if self.dtype == np.float64 else "float"
        self._module = emulated_module(self._source, {"MSRL_REAL": real, **defines})
        self._init_kernel_env(num_envs, seed, threads_per_block)

    def _empty(self, shape: tuple[int, ...], kind: str) -> np.ndarray:
        return np.empty(shape, self.dtype if kind == "real" else _KINDS[kind])

    def _launch(self, kernel: str, args: list[Any]) -> None:
        self._module.launch(kernel, self._grid, self._block, args)

    def _as_real(self, value: Any) -> np.ndarray:
        return np.ascontiguousarray(_numpy(value), dtype=self.dtype)

    def _as_int32(self, value: Any) -> np.ndarray:
        return np.ascontiguousarray(_numpy(value), dtype=np.int32)

    def _as_mask(self, mask: Any) -> np.ndarray:
        return np.asarray(_numpy(mask), dtype=bool)

    def _where(self, mask: Any, a: Any, b: Any) -> np.ndarray:
        return np.where(mask, a, b)

    def _copy(self, array: np.ndarray) -> np.ndarray:
        return array.copy()

    def _to_cpu_tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array.copy())

    def _new_tracker(self) -> EpisodeTracker:
        return EpisodeTracker(self.num_envs)

    def _finish_episodes(self, terminated: np.ndarray, truncated: np.ndarray) -> None:
        done = (terminated + truncated) > 0
        if done.any():  # a host check is free here, and skips the bookkeeping on most steps
            self._tracker.finish(done)


class CartPoleEmulated(CartPoleKernelMixin, CartPoleParams, NumpyKernelEnv):
    """CartPole-v1 kernels on the CPU emulation; same API as ``CartPoleNumpy``.

    ``step`` takes integer actions of shape ``(num_envs,)`` in {0, 1} and
    returns float32 ``(obs, reward, terminated, truncated)``; the state is
    ``dtype`` (float64 for exact comparisons with NumPy, float32 like the GPU).
    """

    def __init__(self, num_envs: int, seed: int = 0, dtype: Any = np.float32, threads_per_block: int = 256) -> None:
        self.observation_space, self.action_space = self._spaces()
        self._init_numpy(num_envs, seed, dtype, threads_per_block, {})

    def _as_action(self, action: Any) -> np.ndarray:
        a = _numpy(action)
        if a.shape != (self.num_envs,):
            raise EnvError(
                f"CartPole-v1 expects actions of shape ({self.num_envs},) with values in {{0, 1}}, got shape {a.shape}"
            )
        if a.dtype.kind not in "iufb":
            raise EnvError(f"CartPole-v1 actions must be integers 0 or 1, got dtype {a.dtype}")
        if a.size and not ((a == 0) | (a == 1)).all():
            raise EnvError(f"CartPole-v1 actions must be 0 or 1, got values in [{a.min()}, {a.max()}]")
        return np.ascontiguousarray(a, dtype=np.int64)


class PendulumEmulated(PendulumParams, NumpyKernelEnv):
    """Pendulum-v1 kernels on the CPU emulation; same API as ``PendulumNumpy``.

    Actions: floats of shape ``(num_envs, 1)`` or ``(num_envs,)``, passed to the
    kernel as float32 (what a float32 policy produces; a float64 action is
    rounded to float32 first, where the NumPy backend would keep float64).
    ``g`` is compiled into the kernel.
    """

    env_id = "Pendulum-v1"
    state_dim = 2
    obs_dim = 3
    _source = "pendulum"

    def __init__(
        self, num_envs: int, seed: int = 0, dtype: Any = np.float32, threads_per_block: int = 256, g: float = 10.0
    ) -> None:
        self._constants(float(g))
        self.observation_space, self.action_space = self._spaces()
        self._init_numpy(num_envs, seed, dtype, threads_per_block, {"MSRL_PENDULUM_G": repr(float(g))})

    def _as_action(self, action: Any) -> np.ndarray:
        a = _numpy(action)
        n = self.num_envs
        if a.shape != (n, 1) and a.shape != (n,):
            raise EnvError(f"Pendulum-v1 expects float actions of shape ({n}, 1) or ({n},), got shape {a.shape}")
        if a.dtype.kind not in "iuf":
            raise EnvError(f"Pendulum-v1 actions must be floats, got dtype {a.dtype}")
        a = np.ascontiguousarray(a.reshape(n), dtype=np.float32)
        if not np.isfinite(a).all():
            raise EnvError("Pendulum-v1 actions must be finite, got NaN or inf")
        return a
