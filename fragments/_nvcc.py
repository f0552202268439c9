"""Compile kernel sources (this package's and every environment's) with nvcc, to PTX or a
cubin, cached on disk.

Used by the tests (every ``.cu`` must build as real CUDA, also on machines
without a GPU) and by ``fragments.cuda`` to build the cubin it loads; both go
through the cache scheme of ``fragments._kernel_source`` (key = sources +
defines + flags + nvcc version; build to a temporary file, then rename).
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from fragments._kernel_source import (
    KernelBuildError,
    cache_dir,
    define_flags,
    include_flags,
    load_source,
    normalise_defines,
    temp_path_for,
)
from msrl.core import ConfigError

NVCC_FLAGS = ("-O3", "-std=c++17")


def find_nvcc() -> str | None:
    """nvcc from PATH, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin``
    or the newest ``/usr/local/cuda-*/bin``; None if there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append("/usr/local/cuda/bin")
    candidates += sorted(glob.glob("/usr/local/cuda-*/bin"), key=_version_key, reverse=True)
    for directory in candidates:
        path = os.path.join(directory, "nvcc")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.name.removeprefix("cuda-")
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def require_nvcc() -> str:
    nvcc = find_nvcc()
    if nvcc is None:
        raise ConfigError(
            "compiling the CUDA kernels needs nvcc: not found on PATH, $CUDA_HOME/bin or /usr/local/cuda*/bin "
            "(install the CUDA toolkit or set CUDA_HOME)"
        )
    return nvcc


@functools.cache
def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else nvcc


def compile_to_cache(
    source_name: str,
    target: str = "cubin",
    arch: str = "sm_90",
    defines: Mapping[str, object] | None = None,
    extra_flags: Sequence[str] = (),
) -> Path:
    """Build the kernel source ``source_name`` (``fragments._kernel_source.find_source``) to
    ``target`` ("ptx" or "cubin") for ``arch`` once per configuration and return the cached
    file's path.

    ``extra_flags`` e.g. ``["--fmad=false"]`` (no FMA contraction: closer to
    the CPU's double results, slower).
    """
    if target not in ("ptx", "cubin"):
        raise ValueError(f"target must be 'ptx' or 'cubin', got {target!r}")
    if not arch.startswith("sm_") or not arch[3:].rstrip("a").isdigit():
        raise ValueError(f"arch must look like 'sm_90', got {arch!r}")
    nvcc = require_nvcc()
    source = load_source(source_name)
    flags = [*NVCC_FLAGS, f"-arch={arch}", f"--{target}", *define_flags(normalise_defines(defines)), *extra_flags]
    key = source.digest(" ".join(flags), nvcc_version(nvcc))
    out = cache_dir() / f"{source.name}-{arch}-{key[:24]}.{target}"
    if out.exists():
        return out
    tmp = temp_path_for(out)
    cmd = [nvcc, *flags, *include_flags(source), str(source.path), "-o", str(tmp)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise KernelBuildError(f"nvcc failed on {source.path.name}:\n{' '.join(cmd)}\n{result.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def compile_ptx(source_name: str, arch: str = "sm_90", defines: Mapping[str, object] | None = None, **kw) -> bytes:
    """The PTX of the kernel source ``source_name`` for ``arch`` (cached)."""
    return compile_to_cache(source_name, "ptx", arch, defines, **kw).read_bytes()


def compile_cubin(source_name: str, arch: str = "sm_90", defines: Mapping[str, object] | None = None, **kw) -> bytes:
    """The cubin of the kernel source ``source_name`` for ``arch`` (cached)."""
    return compile_to_cache(source_name, "cubin", arch, defines, **kw).read_bytes()
