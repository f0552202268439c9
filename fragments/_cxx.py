"""Building msrl's kernel sources with the host C++ compiler, for the two CPU
runners of the ``.cu`` files: the emulation of CUDA's execution model
(``fragments._cuda_emulation``, for checking) and the native build
(``fragments._native``, for speed).  Both compile the same translation unit
shape (the ``.cu`` plus generated ``extern "C"`` launch wrappers) against a
force-included header, and cache the shared library on disk under a name
derived from the sources, header, flags and compiler version.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from fragments._kernel_source import (
    KernelBuildError,
    KernelSource,
    cache_dir,
    include_flags,
    temp_path_for,
    write_atomically,
)
from msrl.core import ConfigError


class NoCompilerError(ConfigError):
    """There is no C++ compiler to build the kernels with (a ``ConfigError``: one line)."""


def find_cxx(purpose: str = "the CUDA emulation") -> str:
    """The C++ compiler: ``$CXX`` or ``g++`` on PATH; ``NoCompilerError`` if neither exists."""
    cxx = os.environ.get("CXX") or "g++"
    path = shutil.which(cxx)
    if path is None:
        raise NoCompilerError(f"{purpose} needs a C++ compiler with OpenMP: {cxx!r} is not on PATH (set CXX)")
    return path


@functools.cache
def compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cxx


def build_library(
    source: KernelSource, unit: str, header: Path, flags: Sequence[str], kind: str, cxx: str, *key_extra: str
) -> Path:
    """Compile ``unit`` (C++ text including ``source``) with ``header`` force-included
    into ``<cache>/<source>-<kind>-<key>.so``, or return the cached library.  Built in a
    temporary file and renamed into place, so concurrent processes never load a
    half-written library; a failed build raises ``KernelBuildError`` with the
    compiler's output."""
    key = source.digest(header.read_text(), unit, " ".join(flags), compiler_version(cxx), *key_extra)
    target = cache_dir() / f"{source.name}-{kind}-{key[:24]}.so"
    if target.exists():
        return target
    cpp = target.with_suffix(".cpp")
    write_atomically(cpp, unit.encode())
    tmp = temp_path_for(target)
    cmd = [cxx, *flags, "-include", str(header), *include_flags(source), str(cpp), "-o", str(tmp)]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:  # e.g. $CXX exists but cannot be executed
        tmp.unlink(missing_ok=True)
        raise KernelBuildError(f"{kind} build of {source.path.name} failed: {exc}") from None
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise KernelBuildError(f"{kind} build of {source.path.name} failed:\n{' '.join(cmd)}\n{result.stderr[-4000:]}")
    os.replace(tmp, target)
    return target


def load_library(path: Path) -> ctypes.CDLL:
    """dlopen a kernel library.  Unless the user chose a policy, libgomp is told to
    wait passively: the emulation oversubscribes the cores by design (a block with
    barriers is blockDim OS threads), and OpenMP threads that spin while waiting
    then starve the ones with work (a barrier of a 128-thread team on 2 cores took
    ~3x longer spinning than sleeping); native launches on a machine shared with
    other jobs fare the same (4,096 CartPole envs on 2 threads, beside other work:
    a 10 ms median step spinning, 0.6 ms sleeping).  The variable is restored right
    after loading, so OpenMP runtimes loaded later are not affected.  libgomp reads
    it only when it is first loaded, though, and torch ships a libgomp.so.1 of its
    own that a process which imported torch has loaded already, and which kernel
    libraries then share: there, only ``OMP_WAIT_POLICY`` set before Python starts
    chooses the policy."""
    previous = os.environ.get("OMP_WAIT_POLICY")
    if previous is None:
        os.environ["OMP_WAIT_POLICY"] = "passive"
    try:
        return ctypes.CDLL(str(path))
    finally:
        if previous is None:
            os.environ.pop("OMP_WAIT_POLICY", None)
