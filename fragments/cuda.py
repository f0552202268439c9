"""The ``cuda`` backend: any environment's CUDA C kernels launched through pycuda
on torch tensors (the GPU path), and the public face of their tooling (nvcc
builds, the CPU emulation and the emulated environments the tests compare with
NumPy).

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

The environments are ``msrl.envs``'s own classes, whichever registration names a
kernel source, with ``Kernels`` as their dynamics: action checks, episode tracking,
``set_state`` and checkpoints are the code every backend shares.

Example (``EnvClass``: the class an ``msrl.envs`` registration names)::

    env = fragments.cuda.cuda_env(EnvClass, 1 << 20, seed=0)   # or msrl.envs.make(env_id, ..., backend="cuda")
    obs, reward, terminated, truncated = env.step(torch.zeros(1 << 20, dtype=torch.int64, device="cuda"))
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fragments._cuda_emulation import EmulatedModule, emulated_module, find_cxx
from fragments._emulated_envs import emulated_env
from fragments._kernel_envs import kernel_env
from fragments._kernel_source import KernelBuildError, load_source, normalise_defines, real_is_double
from fragments._nvcc import compile_ptx, compile_to_cache, find_nvcc, require_nvcc
from msrl.core import ConfigError
from msrl.envs import BatchedEnv, TorchArrays

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
        # Per parameter, what a launch checks: the tensor dtype of a pointer, else the scalar's type.
        self._plans: dict[str, list[tuple[Any, bool, Any]]] = {
            kernel.name: [
                (p, True, self.real_dtype if p.ctype == "real*" else _POINTER_DTYPES[p.ctype])
                if p.is_pointer
                else (p, False, float if p.ctype in ("real", "float", "double") else int)
                for p in kernel.params
            ]
            for kernel in self.source.kernels.values()
        }

    def _format(self, ctype: str) -> str:
        if ctype.endswith("*"):
            return "P"
        if ctype == "real":
            return "d" if self.real_dtype == torch.float64 else "f"
        return _FORMATS[ctype]

    def _pointer(self, kernel: str, param: Any, want: torch.dtype, value: Any) -> int:
        if value is None:
            return 0
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{kernel}: argument {param.name!r} must be a torch tensor or None")
        if value.dtype is not want or value.device != self.device or not value.is_contiguous():
            raise TypeError(
                f"{kernel}: argument {param.name!r} must be a contiguous {want} tensor on {self.device}, "
                f"got {value.dtype} on {value.device} (contiguous={value.is_contiguous()})"
            )
        return value.data_ptr()

    def launch(self, kernel: str, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any]) -> None:
        """Launch ``kernel<<<grid, block>>>(*args)`` asynchronously (see the module
        docstring for the stream).  Tensors for pointers, numbers for scalars.

        A launch is on the path of every environment step, so its host work is kept
        small: the parameters' checks are planned when the module loads, and the
        current stream is read as a raw handle."""
        plan = self._plans[kernel]
        if len(args) != len(plan):
            raise TypeError(f"{kernel} takes {len(plan)} arguments, got {len(args)}")
        values = [
            self._pointer(kernel, p, want, a) if pointer else want(a) for (p, pointer, want), a in zip(plan, args)
        ]
        grid3 = (grid, 1, 1) if isinstance(grid, int) else tuple(grid) + (1,) * (3 - len(grid))
        block3 = (block, 1, 1) if isinstance(block, int) else tuple(block) + (1,) * (3 - len(block))
        side_stream = _current_raw_stream(self.device) != 0
        if side_stream:
            torch.cuda.current_stream(self.device).synchronize()
        self._context.push()
        try:
            self._functions[kernel].prepared_call(grid3, block3, *values)
            if side_stream:
                self._drv.Context.synchronize()
        finally:
            self._drv.Context.pop()


def _current_raw_stream(device: torch.device) -> int:
    """The handle of torch's current stream on ``device`` (0: the legacy default
    stream).  torch's raw-stream getter (what Triton's launcher reads) when it
    has one: the public ``current_stream`` builds a ``Stream`` object, a few
    microseconds of every launch."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device.index))
    return int(torch.cuda.current_stream(device).cuda_stream)


@functools.cache
def _cached_module(source_name: str, defines: tuple, device: torch.device) -> CudaModule:
    return CudaModule(source_name, dict(defines), device)


def cuda_module(source_name: str, defines: Mapping[str, object] | None, device: torch.device) -> CudaModule:
    """A :class:`CudaModule`, shared by every caller with the same configuration."""
    return _cached_module(source_name, tuple(normalise_defines(defines).items()), device)


def cuda_env(
    env: type[BatchedEnv],
    num_envs: int,
    seed: int = 0,
    device: str | torch.device = "cuda",
    dtype: torch.dtype = torch.float32,
    threads_per_block: int = 256,
    validate: bool = False,
    fuse_episodes: bool = True,
    **env_kwargs: Any,
) -> BatchedEnv:
    """``env`` (an ``msrl.envs`` environment with a ``kernel``) stepped by its CUDA C
    kernels on ``device``; state in ``dtype``; ``env_kwargs`` are the environment's own
    (constants are compiled into its kernels: one build per configuration).

    ``step`` takes actions as tensors (on the device: no copy) or NumPy arrays and
    returns float32 CUDA tensors; nothing in it copies to the host, and
    ``metrics`` syncs once per poll.  ``validate=True`` checks action values (a
    host sync per step); shapes are always checked.  A single-agent step is one
    launch, episode bookkeeping included; ``fuse_episodes=False`` does the
    bookkeeping with torch ops after the launch instead (``msrl.envs.Kernels``).
    A multi-agent environment runs one block per environment, whose ``threads_per_block``
    threads stride over its agents; its observations and rewards come per group.
    Unvalidated, what the kernels make of an out-of-range action is the environment's
    to say (its class docstring).
    """
    require_cuda()
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    # cuda_module rejects non-cuda devices; the host code is device-agnostic,
    # which lets the tests drive it with CPU tensors and emulated launches.
    arrays = TorchArrays(device, dtype, validate, columns=False)
    return kernel_env(
        env,
        num_envs,
        seed,
        arrays,
        lambda source, defines: cuda_module(source, defines, device),
        threads_per_block,
        fuse_episodes,
        **env_kwargs,
    )


__all__ = [
    "CudaModule",
    "EmulatedModule",
    "KernelBuildError",
    "compile_ptx",
    "compile_to_cache",
    "cuda_env",
    "cuda_module",
    "emulated_env",
    "emulated_module",
    "find_cxx",
    "find_nvcc",
    "load_source",
    "require_cuda",
]
