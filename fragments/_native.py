"""msrl's CUDA kernels compiled natively for the CPU: the same ``.cu`` source as
C++ (``g++ -O3 -fopenmp -ffp-contract=off``) against ``kernels/cpu_native.h``,
launched through ctypes with NumPy arrays as device memory.

Where the emulation (``fragments._cuda_emulation``) runs CUDA's execution model
to check kernels, this runs them for speed: the blocks split into contiguous
ranges over OpenMP threads, a block's CUDA threads as a plain loop, ``__syncthreads`` a no-op (so a
kernel that may reach a barrier is launched with one thread per block; the
multi-agent kernels stride over agents and are correct for any block size).
Float64 builds (``MSRL_REAL=double``) give NumPy's results bit for bit.

A launch costs a dict lookup, a type and dtype check per array, one
``struct.pack`` and one ctypes call with one argument (about 2 us; a ctypes call
with a kernel's 10-odd typed arguments took 3 us, ``array.ctypes.data`` 5 us per
array): arrays go to C as their object address (``id``), and the generated
wrapper reads NumPy's data pointer and flags (contiguity, writability) itself.

Example::

    mod = native_module(name, defines={"MSRL_REAL": "double"})  # an environment's kernel source, by name
    mod.launch(f"{name}_reset", grid=(4, 1, 1), block=(256, 1, 1), args=[state, n, seed, counter])
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fragments import _cxx
from fragments._cuda_emulation import _POINTER_DTYPES, EmulatedModule, _dim3
from fragments._kernel_source import KERNEL_DIR, Kernel, KernelSource, define_flags, normalise_defines
from msrl.core import ConfigError

NATIVE_HEADER = KERNEL_DIR / "cpu_native.h"
# -ffp-contract=off and no fast-math: double results equal NumPy's (no FMA, no reassociation).
# -fno-semantic-interposition: in a -fPIC library GCC otherwise assumes the kernel functions
# (extern "C" globals) may be interposed and will not inline them into the launch loops: the
# float32 CartPole step took 60 ns per environment instead of 18 (standalone harness).
NATIVE_FLAGS = (
    "-O3",
    "-std=c++17",
    "-fopenmp",
    "-shared",
    "-fPIC",
    "-fno-semantic-interposition",
    "-ffp-contract=off",
    "-fno-fast-math",
) + (
    # TLS descriptors: the CUDA built-ins (threadIdx...) are thread-locals read in every
    # CUDA thread, and the default dialect's __tls_get_addr per access cost ~2x at 1 env.
    ("-mtls-dialect=gnu2",) if platform.machine().lower() in ("x86_64", "amd64") else ()
)
_GENERATOR_VERSION = "1"
PARALLEL_MIN_THREADS = 2048
"""Fewest CUDA threads (CartPole: environments) in a launch worth waking a second OS thread for;
a launch of a kernel that may reach a barrier (a whole multi-agent environment per block) is
spread from two blocks on."""

_ERRORS = {
    1: "invalid launch configuration (CUDA allows at most 1024 threads per block, block.z <= 64)",
    3: "the kernel reached __syncthreads() with more than one thread per block",
    4: "the kernel declared more than 48 KiB of shared memory",
}


def _array_layout_ok() -> bool:
    """Whether NumPy arrays keep their data pointer and flags where ``cpu_native.h``
    reads them (PyArrayObject_fields after a 16-byte PyObject header)."""
    if platform.python_implementation() != "CPython":  # id() is an address only there
        return False
    try:
        base = np.arange(12, dtype=np.float64).reshape(3, 4)
        readonly = base.copy()
        readonly.flags.writeable = False
        for array in (base, base[:, ::2], readonly):
            data = ctypes.c_void_p.from_address(id(array) + 16).value
            flags = ctypes.c_int.from_address(id(array) + 64).value
            expected = (0x1 if array.flags.c_contiguous else 0) | (0x400 if array.flags.writeable else 0)
            if data != array.ctypes.data or flags & 0x401 != expected:
                return False
        return True
    except Exception:  # a Python without object addresses as ids: plain pointers
        return False


_BY_OBJECT = _array_layout_ok()


_SLOT_FORMATS = {
    "int": "i4x",
    "unsigned int": "I4x",
    "long long": "q",
    "unsigned long long": "Q",
    "float": "d",
    "double": "d",
    "real": "d",
}
_HEAD = 7  # grid (3), block (3), OS threads: the slots before the kernel's parameters
_HEAD_FORMAT = "@" + "I4x" * 6 + "i4x"


def _slot(index: int, ctype: str) -> str:
    """C++ reading packed slot ``index`` as ``ctype``."""
    if ctype in ("float", "double", "real"):
        return f"({ctype})::msrl_native::arg<double>(a, {index})"
    return f"::msrl_native::arg<{ctype}>(a, {index})"


def _wrapper(kernel: Kernel) -> str:
    """``extern "C" int msrl_native_<k>(const unsigned char* a)``: the launch's arguments
    packed in 8-byte slots (grid, block, OS threads, then the kernel's parameters, arrays
    as NumPy object addresses that are unpacked and checked here)."""
    lines = [
        f'extern "C" int msrl_native_{kernel.name}(const unsigned char* a) {{',
        "    const dim3 grid(" + ", ".join(_slot(i, "unsigned int") for i in range(3)) + ");",
        "    const dim3 block(" + ", ".join(_slot(i, "unsigned int") for i in range(3, 6)) + ");",
    ]
    for index, p in enumerate(kernel.params):
        slot = _HEAD + index
        if p.is_pointer:
            written = "false" if p.const else "true"
            lines.append(f"    {'const ' if p.const else ''}{p.ctype} {p.name};")
            lines.append(
                f"    if (!::msrl_native::array_data({_slot(slot, 'const void*')}, {written}, &{p.name})) "
                f"return ::msrl_native::kBadArray + {index};"
            )
        else:
            lines.append(f"    const {p.ctype} {p.name} = {_slot(slot, p.ctype)};")
    names = ", ".join(p.name for p in kernel.params)
    lines.append(
        f"    return ::msrl_native::launch(grid, block, {_slot(6, 'int')}, [&]() {{ {kernel.name}({names}); }});"
    )
    return "\n".join(lines) + "\n}\n"


FUSABLE = (
    "real*",
    "long long*",
    "long long*",
    "float*",
    "float*",
    "float*",
    "float*",
    "long long",
    "unsigned long long",
    "unsigned long long",
)
"""The parameters of a single-agent ``<env>_step`` kernel with Discrete actions
(``msrl.envs._kernels``' contract): state, elapsed, actions, obs, reward, terminated,
truncated, n, seed and counter: what ``FusedStep`` passes, in that order."""


def fusable(kernel: Kernel) -> bool:
    return kernel.name.endswith("_step") and tuple(p.ctype for p in kernel.params) == FUSABLE


def _fused_wrapper(kernel: Kernel) -> str:
    """``extern "C" long long msrl_native_fused_<k>(const unsigned char* a)``: the step
    kernel with the host's bookkeeping around it, in one call (``fragments.native.FusedStep``): the
    kernel's slots, then n_actions, total and start.  Returns the finished episodes,
    -1 for an action out of range, or another negative number for anything the
    checked path should report; nothing has run then."""
    lines = _wrapper(kernel).splitlines()[:-2]  # everything but the launch and the brace
    lines[0] = f'extern "C" long long msrl_native_fused_{kernel.name}(const unsigned char* a) {{'
    first = _HEAD + len(kernel.params)
    lines = [line.replace("return ::msrl_native::kBadArray", "return -::msrl_native::kBadArray") for line in lines]
    lines += [
        f"    long long* lengths;  // {kernel.params[1].name}, which the bookkeeping writes",
        f"    if (!::msrl_native::array_data({_slot(_HEAD + 1, 'const void*')}, true, &lengths)) return -2;",
        f"    const long long n_actions = {_slot(first, 'long long')};",
        "    double* total;",
        "    double* start;",
        f"    if (!::msrl_native::array_data({_slot(first + 1, 'const void*')}, true, &total)) return -2;",
        f"    if (!::msrl_native::array_data({_slot(first + 2, 'const void*')}, true, &start)) return -2;",
        f"    const long long count = {kernel.params[7].name};",
        f"    if (!::msrl_native::discrete_ok({kernel.params[2].name}, count, n_actions)) return -1;",
        f"    const int code = ::msrl_native::launch(grid, block, {_slot(6, 'int')}, "
        f"[&]() {{ {kernel.name}({', '.join(p.name for p in kernel.params)}); }});",
        "    if (code != ::msrl_native::kOk) return -1000 - code;",
        f"    return ::msrl_native::record_step({', '.join(p.name for p in kernel.params[4:7])}, total, start, "
        "lengths, count);",
        "}",
    ]
    return "\n".join(lines) + "\n"


def translation_unit(source: KernelSource) -> str:
    wrappers = "\n".join(_wrapper(k) for k in source.kernels.values())
    wrappers += "".join("\n" + _fused_wrapper(k) for k in source.kernels.values() if fusable(k))
    return f'// generated by fragments/_native.py\n#include "{source.path}"\n\n{wrappers}'


class NativeModule(EmulatedModule):
    """One kernel source compiled natively (cached across runs like the emulation's).

    ``threads``: OpenMP threads a large launch is spread over (small launches run in
    the calling thread).  Argument checks are the emulation's, made cheap: per
    array a type and dtype identity check in Python, contiguity and writability in
    the wrapper; any failure reruns the emulation's full checks for their message.
    """

    def __init__(self, source_name: str, defines: Mapping[str, object] | None = None, threads: int = 1) -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        self.threads = threads
        self._fused: dict[str, Any] = {}
        self._plans: dict[tuple[str, Any, Any], tuple[Any, Any, tuple[Any, ...], list[Any]]] = {}
        super().__init__(source_name, defines)

    def _build(self) -> Path:
        unit = translation_unit(self.source)
        flags = [*NATIVE_FLAGS, *define_flags(self.defines)]
        if not _BY_OBJECT:
            flags.append("-DMSRL_NATIVE_RAW_POINTERS")
        cxx = _cxx.find_cxx("the cpu-kernel backend")
        return _cxx.build_library(self.source, unit, NATIVE_HEADER, flags, "native", cxx, _GENERATOR_VERSION)

    def _bind(self) -> None:
        """ctypes signatures of the generated wrappers (called by ``EmulatedModule.__init__``)."""
        for kernel in self.source.kernels.values():
            fn = getattr(self._lib, f"msrl_native_{kernel.name}")
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_char_p]
            self._functions[kernel.name] = fn
            if fusable(kernel):
                fused = getattr(self._lib, f"msrl_native_fused_{kernel.name}")
                fused.restype = ctypes.c_longlong
                fused.argtypes = [ctypes.c_char_p]
                self._fused[kernel.name] = fused

    def fused_step(self, kernel: str, grid: Any, block: Any) -> tuple[Any, struct.Struct, tuple[Any, ...]] | None:
        """``(function, packer, leading slots)`` of the fused step of ``kernel`` (the
        kernel plus the host's action check and episode bookkeeping in one call), or
        None where there is none.  Arrays are passed by object address unchecked
        but for contiguity and writability: for callers that own them."""
        if not _BY_OBJECT or kernel not in self._fused:
            return None
        _, packer, head, _ = self._plan(kernel, grid, block)
        return self._fused[kernel], struct.Struct(packer.format + "qPP"), head

    def _plan(self, kernel: str, grid: Any, block: Any) -> tuple[Any, Any, tuple[Any, ...], list[Any]]:
        """The function, the packer, leading slots (dims, OS threads) and per-parameter
        dtype (None for scalars, which the packer checks) of a launch shape."""
        if kernel not in self.source.kernels:
            raise KeyError(f"{self.source.name}.cu has no kernel {kernel!r}; kernels: {', '.join(self.kernels)}")
        spec = self.source.kernels[kernel]
        g, b = _dim3(grid), _dim3(block)
        threads, blocks = b[0] * b[1] * b[2], g[0] * g[1] * g[2]
        if spec.uses_barrier and threads != 1:
            raise ConfigError(
                f"{kernel} may reach __syncthreads(): the native launch runs a block's threads one after "
                f"another, so it needs one thread per block, got block={b}"
            )
        wide = blocks > 1 and (blocks * threads >= PARALLEL_MIN_THREADS or spec.uses_barrier)
        dtypes = [self._want(p) if p.is_pointer else None for p in spec.params]
        packer = struct.Struct(
            _HEAD_FORMAT + "".join("P" if p.is_pointer else _SLOT_FORMATS[p.ctype] for p in spec.params)
        )
        return self._functions[kernel], packer, (*g, *b, self.threads if wide else 1), dtypes

    def _want(self, param: Any) -> np.dtype:
        return self.real_dtype if param.ctype == "real*" else np.dtype(_POINTER_DTYPES[param.ctype])

    def launch(
        self,
        kernel: str,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[Any],
        mode: str | None = None,
    ) -> None:
        """Run ``kernel<<<grid, block>>>(*args)`` natively and return when done (``args`` as
        for ``EmulatedModule.launch``; ``mode`` is accepted for its signature and ignored)."""
        try:
            fn, packer, head, dtypes = self._plans[kernel, grid, block]
        except (KeyError, TypeError):  # a new shape, or unhashable dims (lists): plan it
            fn, packer, head, dtypes = plan = self._plan(kernel, grid, block)
            if isinstance(grid, (int, tuple)) and isinstance(block, (int, tuple)):
                self._plans[kernel, grid, block] = plan
        if len(args) != len(dtypes):
            self._checked(kernel, args)
        values = list(head)
        for want, value in zip(dtypes, args):
            if want is None:
                values.append(value)  # a scalar: the packer checks its type and range
            elif type(value) is np.ndarray and value.dtype is want:
                values.append(id(value) if _BY_OBJECT else value.ctypes.data)
            elif value is None:
                values.append(0)
            else:
                self._checked(kernel, args)  # raises the emulation's message
                values.append(id(value) if _BY_OBJECT else value.ctypes.data)  # an equal, non-canonical dtype
        try:
            packed = packer.pack(*values)
        except struct.error:
            self._checked(kernel, args)
            raise
        code = fn(packed)  # args (the caller's) keeps every array alive until this returns
        if code >= 100:
            self._checked(kernel, args)
            name = self.source.kernels[kernel].params[code - 100].name
            raise TypeError(f"{kernel}: argument {name!r} must be C-contiguous (and writeable if the kernel writes it)")
        if code != 0:
            raise RuntimeError(f"native launch of {kernel} failed: {_ERRORS.get(code, f'error code {code}')}")

    def _checked(self, kernel: str, args: Sequence[Any]) -> None:
        """The emulation's argument checks, for their error messages."""
        spec = self.source.kernels[kernel]
        if len(args) != len(spec.params):
            names = ", ".join(p.name for p in spec.params)
            raise TypeError(f"{kernel} takes {len(spec.params)} arguments ({names}), got {len(args)}")
        for p, a in zip(spec.params, args):
            if p.is_pointer:
                self._pointer(kernel, p, a)
            else:
                self._scalar(kernel, p, a)


@functools.cache
def _cached(source_name: str, defines: tuple[tuple[str, str], ...], threads: int, cxx: str) -> NativeModule:
    return NativeModule(source_name, dict(defines), threads)


def native_module(source_name: str, defines: Mapping[str, object] | None = None, threads: int = 1) -> NativeModule:
    """A :class:`NativeModule`, shared in the process by every caller with the same configuration
    and the same ``$CXX`` (a process that points ``$CXX`` elsewhere builds with that compiler, or
    learns that it cannot, rather than reusing what another compiler built)."""
    return _cached(source_name, tuple(normalise_defines(defines).items()), threads, os.environ.get("CXX", ""))


__all__ = ["NATIVE_FLAGS", "PARALLEL_MIN_THREADS", "NativeModule", "native_module"]
