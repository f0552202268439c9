"""The GPU path: msrl's CUDA C kernels launched through pycuda on torch tensors.

Why pycuda and raw kernels rather than torch ops: one environment step is one
kernel launch (physics, time limit, autoreset and RNG fused, state in
registers), instead of the dozens of small torch kernels the torch backend
launches per step.

How it cooperates with torch:

* Context.  torch is initialised first (a tensor is created on the device),
  then pycuda retains the device's *primary* context, the one torch's runtime
  API uses, and pushes it around every module load and launch.  So kernels
  read and write torch's allocations directly: arguments are
  ``tensor.data_ptr()`` (zero copy).
* Stream.  Launches go to the legacy default stream (pycuda's ``stream=None``),
  which is torch's default stream too, so they are ordered with torch's work
  without any synchronisation.  pycuda cannot launch on a stream it did not
  create, so when torch's current stream is another one the launch
  synchronises that stream first and waits for the kernel afterwards (correct,
  but slower: keep the environment on the default stream).
* Build.  nvcc compiles each kernel file once per (defines, GPU architecture)
  into the cubin cache of ``fragments._nvcc``.

``import fragments.cuda`` does not import pycuda; constructing a module or an
environment does, after ``require_cuda()`` has checked that everything needed
is there.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from fragments._kernel_envs import CartPoleKernelMixin, KernelEnv
from fragments._kernel_source import load_source, normalise_defines, real_is_double
from fragments._nvcc import compile_to_cache, require_nvcc
from msrl._errors import ConfigError, EnvError
from msrl.envs._episodes import TorchEpisodeTracker
from msrl.envs.cartpole import CartPoleParams
from msrl.envs.pendulum import PendulumParams

_POINTER_DTYPES = {
    "float*": torch.float32,
    "double*": torch.float64,
    "int*": torch.int32,
    "unsigned int*": getattr(torch, "uint32", None),  # torch >= 2.3
    "long long*": torch.int64,
}
# struct formats for pycuda's prepared calls
_FORMATS = {
    "int": "i",
    "unsigned int": "I",
    "long long": "q",
    "unsigned long long": "Q",
    "float": "f",
    "double": "d",
}


def require_cuda() -> None:
    """Raise ``ConfigError`` with one line naming what the CUDA backends lack:
    pycuda, a GPU visible to torch, or nvcc."""
    if importlib.util.find_spec("pycuda") is None:
        raise ConfigError("the cuda executor needs pycuda: install msrl[cuda]")
    if not torch.cuda.is_available():
        raise ConfigError("the cuda executor needs an NVIDIA GPU: torch.cuda.is_available() is False")
    require_nvcc()


class CudaModule:
    """One kernel source, built with nvcc for the GPU of ``device`` and loaded
    into torch's primary context.  ``launch`` takes torch CUDA tensors."""

    def __init__(
        self,
        source_name: str,
        defines: Mapping[str, object] | None = None,
        device: str | torch.device | None = None,
        extra_flags: Sequence[str] = (),
    ) -> None:
        require_cuda()
        self.device = torch.device("cuda") if device is None else torch.device(device)
        if self.device.type != "cuda":
            raise ConfigError(f"the cuda backend runs on a cuda device, got device={str(self.device)!r}")
        import pycuda.driver as drv

        self._drv = drv
        torch.cuda.init()
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        torch.empty(1, device=self.device)  # makes torch create (and make current) the primary context
        self.source = load_source(source_name)
        self.defines = normalise_defines(defines)
        self.real_dtype = torch.float64 if real_is_double(self.defines) else torch.float32
        major, minor = torch.cuda.get_device_capability(self.device)
        self.arch = f"sm_{major}{minor}"
        self.cubin = compile_to_cache(source_name, "cubin", self.arch, self.defines, extra_flags)

        drv.init()
        self._context = drv.Device(self.device.index).retain_primary_context()
        self._context.push()
        try:
            self._module = drv.module_from_file(str(self.cubin))
            self._functions = {}
            for kernel in self.source.kernels.values():
                fn = self._module.get_function(kernel.name)
                fn.prepare("".join(self._format(p.ctype) for p in kernel.params))
                self._functions[kernel.name] = fn
        finally:
            drv.Context.pop()

    def _format(self, ctype: str) -> str:
        if ctype.endswith("*"):
            return "P"
        if ctype == "real":
            return "d" if self.real_dtype == torch.float64 else "f"
        return _FORMATS[ctype]

    def _pointer(self, kernel: str, param: Any, value: Any) -> int:
        if value is None:
            return 0
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{kernel}: argument {param.name!r} must be a torch tensor or None")
        want = self.real_dtype if param.ctype == "real*" else _POINTER_DTYPES[param.ctype]
        if value.dtype != want or value.device != self.device or not value.is_contiguous():
            raise TypeError(
                f"{kernel}: argument {param.name!r} must be a contiguous {want} tensor on {self.device}, "
                f"got {value.dtype} on {value.device} (contiguous={value.is_contiguous()})"
            )
        return value.data_ptr()

    def launch(
        self, kernel: str, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any]
    ) -> None:
        """Launch ``kernel<<<grid, block>>>(*args)`` asynchronously (see the module
        docstring for the stream).  Tensors for pointers, numbers for scalars."""
        spec = self.source.kernels[kernel]
        if len(args) != len(spec.params):
            raise TypeError(f"{kernel} takes {len(spec.params)} arguments, got {len(args)}")
        values = [
            self._pointer(kernel, p, a)
            if p.is_pointer
            else (float(a) if p.ctype in ("real", "float", "double") else int(a))
            for p, a in zip(spec.params, args)
        ]
        grid3 = tuple(grid) + (1,) * (3 - len(grid)) if not isinstance(grid, int) else (grid, 1, 1)
        block3 = tuple(block) + (1,) * (3 - len(block)) if not isinstance(block, int) else (block, 1, 1)
        current = torch.cuda.current_stream(self.device)
        side_stream = current.cuda_stream != 0
        if side_stream:
            current.synchronize()
        self._context.push()
        try:
            self._functions[kernel].prepared_call(grid3, block3, *values)
            if side_stream:
                self._drv.Context.synchronize()
        finally:
            self._drv.Context.pop()


@functools.lru_cache(maxsize=None)
def _cached_module(source_name: str, defines: tuple, device: torch.device) -> CudaModule:
    return CudaModule(source_name, dict(defines), device)


def cuda_module(source_name: str, defines: Mapping[str, object] | None, device: torch.device) -> CudaModule:
    """A :class:`CudaModule`, shared by every caller with the same configuration."""
    return _cached_module(source_name, tuple(normalise_defines(defines).items()), device)


def _torch(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


class TorchKernelEnv(KernelEnv):
    """The array hooks of ``KernelEnv`` on torch CUDA tensors, launches through pycuda.
    Nothing in ``step`` copies to the host; ``metrics`` syncs once per poll."""

    def _init_torch(
        self, num_envs: int, seed: int, device: Any, dtype: torch.dtype, threads_per_block: int, defines: dict
    ) -> None:
        require_cuda()
        if dtype not in (torch.float32, torch.float64):
            raise ConfigError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        self.dtype = dtype
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        # CudaModule rejects non-cuda devices; the host code below is device-agnostic,
        # which lets the tests drive it with CPU tensors and emulated launches.
        real = "double" if dtype == torch.float64 else "float"
        self._module = cuda_module(self._source, {"MSRL_REAL": real, **defines}, self.device)
        self._init_kernel_env(num_envs, seed, threads_per_block)

    def _empty(self, shape: tuple[int, ...], kind: str) -> torch.Tensor:
        dtype = {"real": self.dtype, "float32": torch.float32, "int32": torch.int32, "int64": torch.int64}[kind]
        return torch.empty(shape, dtype=dtype, device=self.device)

    def _launch(self, kernel: str, args: list[Any]) -> None:
        self._module.launch(kernel, self._grid, self._block, args)

    def _as_real(self, value: Any) -> torch.Tensor:
        return _torch(value).to(self.device, self.dtype).contiguous()

    def _as_int32(self, value: Any) -> torch.Tensor:
        return _torch(value).to(self.device, torch.int32).contiguous()

    def _as_mask(self, mask: Any) -> torch.Tensor:
        return _torch(mask).to(self.device, torch.bool)

    def _where(self, mask: Any, a: Any, b: Any) -> torch.Tensor:
        return torch.where(mask, a, b)

    def _copy(self, array: torch.Tensor) -> torch.Tensor:
        return array.clone()

    def _to_cpu_tensor(self, array: torch.Tensor) -> torch.Tensor:
        return array.detach().cpu().clone()

    def _new_tracker(self) -> TorchEpisodeTracker:
        return TorchEpisodeTracker(self.num_envs, self.device)


class CartPoleCuda(CartPoleKernelMixin, CartPoleParams, TorchKernelEnv):
    """CartPole-v1 as CUDA kernels; same API as ``CartPoleTorch``.

    ``step`` takes integer actions ``(num_envs,)`` in {0, 1} (a tensor on the
    device avoids a copy) and returns float32 CUDA tensors ``(obs, reward,
    terminated, truncated)``.  ``validate=True`` checks action values (a host
    sync per step); unvalidated, any nonzero action pushes right.
    """

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        device: str | torch.device = "cuda",
        dtype: torch.dtype = torch.float32,
        threads_per_block: int = 256,
        validate: bool = False,
    ) -> None:
        self.validate = bool(validate)
        self.observation_space, self.action_space = self._spaces()
        self._init_torch(num_envs, seed, device, dtype, threads_per_block, {})

    def _as_action(self, action: Any) -> torch.Tensor:
        a = _torch(action)
        if tuple(a.shape) != (self.num_envs,):
            raise EnvError(
                f"CartPole-v1 expects actions of shape ({self.num_envs},) with values in {{0, 1}}, "
                f"got shape {tuple(a.shape)}"
            )
        a = a.to(self.device, torch.int64).contiguous()
        if self.validate and not bool(((a == 0) | (a == 1)).all()):
            raise EnvError(f"CartPole-v1 actions must be 0 or 1, got values in [{a.min().item()}, {a.max().item()}]")
        return a


class PendulumCuda(PendulumParams, TorchKernelEnv):
    """Pendulum-v1 as CUDA kernels; same API as ``PendulumTorch``.

    Actions: floats ``(num_envs, 1)`` or ``(num_envs,)``, passed to the kernel
    as float32.  ``g`` is compiled into the kernel (one build per value).
    """

    env_id = "Pendulum-v1"
    state_dim = 2
    obs_dim = 3
    _source = "pendulum"

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        device: str | torch.device = "cuda",
        dtype: torch.dtype = torch.float32,
        threads_per_block: int = 256,
        validate: bool = False,
        g: float = 10.0,
    ) -> None:
        self.validate = bool(validate)
        self._constants(float(g))
        self.observation_space, self.action_space = self._spaces()
        self._init_torch(num_envs, seed, device, dtype, threads_per_block, {"MSRL_PENDULUM_G": repr(float(g))})

    def _as_action(self, action: Any) -> torch.Tensor:
        a = _torch(action)
        n = self.num_envs
        if tuple(a.shape) != (n, 1) and tuple(a.shape) != (n,):
            raise EnvError(f"Pendulum-v1 expects float actions of shape ({n}, 1) or ({n},), got shape {tuple(a.shape)}")
        a = a.to(self.device, torch.float32).reshape(n).contiguous()
        if self.validate and not bool(torch.isfinite(a).all()):
            raise EnvError("Pendulum-v1 actions must be finite, got NaN or inf")
        return a


__all__ = ["CartPoleCuda", "CudaModule", "PendulumCuda", "cuda_module", "require_cuda"]
