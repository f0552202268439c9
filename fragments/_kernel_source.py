"""What the GPU loader and the CPU emulation both need to know about a kernel
source: where it is, its text (with the headers it includes, for cache keys), the
signatures of its ``extern "C" __global__`` kernels (to type-check arguments
and to generate launch wrappers), which kernels may reach ``__syncthreads``,
and where compiled artefacts are cached.

A source is named by its stem: ``fragments/kernels/`` holds this package's own
(action sampling, reductions) and the headers that run CUDA code on the CPU;
every environment's is where its registration says (``msrl.envs.kernel_sources``),
so any environment with kernels is built here without this package naming it.
Quoted includes are found beside the source, then among the headers every kernel
may include (``msrl.envs.KERNEL_HEADERS``).

Everything here is plain Python (no compiler, no pycuda), so it is cheap to
import and can be tested anywhere.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msrl.envs

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
"""This package's own kernel sources and the CPU headers (``cpu_emulation.h``, ``cpu_native.h``)."""

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
_KERNEL = re.compile(
    r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)\s*\(([^)]*)\)\s*\{'
)
_FUNCTION = re.compile(r"\b(?:__global__|__device__)\b[^;{}()]*?\b(\w+)\s*\(([^)]*)\)\s*\{")


class KernelBuildError(RuntimeError):
    """A kernel source failed to compile (the message holds the compiler's output)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``ctype`` is the canonical C type (``"real*"``,
    ``"long long"``...), ``const`` whether a pointer's data is read-only."""

    name: str
    ctype: str
    const: bool

    @property
    def is_pointer(self) -> bool:
        return self.ctype.endswith("*")


@dataclass(frozen=True)
class Kernel:
    name: str
    params: tuple[Param, ...]
    uses_barrier: bool  # may reach __syncthreads(): the emulation runs each block as a thread team


# Parameter types the launchers know how to pass (pointers and scalars).
POINTER_TYPES = ("real*", "float*", "double*", "int*", "unsigned int*", "long long*")
SCALAR_TYPES = ("int", "unsigned int", "long long", "unsigned long long", "float", "double", "real")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def _parse_param(text: str, kernel: str) -> Param:
    words = text.replace("*", " * ").split()
    if len(words) < 2:
        raise KernelBuildError(f"kernel {kernel}: cannot parse parameter {text.strip()!r}")
    name = words[-1]
    const = "const" in words
    type_words = [w for w in words[:-1] if w not in ("const", "__restrict__")]
    ctype = " ".join(w for w in type_words if w != "*") + "*" * type_words.count("*")
    if ctype not in POINTER_TYPES and ctype not in SCALAR_TYPES:
        raise KernelBuildError(
            f"kernel {kernel}: parameter {name!r} has type {ctype!r}; supported: "
            f"{', '.join(POINTER_TYPES + SCALAR_TYPES)}"
        )
    return Param(name, ctype, const)


def _body_end(text: str, open_brace: int) -> int:
    depth = 0
    for pos in range(open_brace, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return pos
    return len(text)


def _barrier_functions(text: str) -> tuple[set[str], set[str]]:
    """Names of functions that may reach __syncthreads(), found by a
    conservative scan: a function is counted if its body mentions
    __syncthreads, or the name of a function or macro that is counted.
    Also returns the names of every function found."""
    bodies: dict[str, str] = {}
    for match in _FUNCTION.finditer(text):
        start = match.end() - 1
        bodies[match.group(1)] = bodies.get(match.group(1), "") + text[start : _body_end(text, start) + 1]
    syncing = {name for name, body in bodies.items() if "__syncthreads" in body}
    syncing |= set(re.findall(r"#\s*define\s+(\w+)[^\n]*__syncthreads", text))  # macros hiding a barrier
    changed = True
    while changed:
        changed = False
        for name, body in bodies.items():
            if name not in syncing and any(re.search(rf"\b{s}\b", body) for s in syncing):
                syncing.add(name)
                changed = True
    return syncing, set(bodies)


@dataclass(frozen=True)
class KernelSource:
    """A ``<name>.cu`` file and the local headers it includes (found in ``include_dirs``)."""

    name: str
    path: Path
    files: tuple[tuple[str, str], ...]  # (file name, text): the .cu first, then its headers
    kernels: dict[str, Kernel]
    include_dirs: tuple[Path, ...]

    def digest(self, *extra: str) -> str:
        """A hash of every file's text plus ``extra`` (defines, compiler version...)."""
        h = hashlib.sha256()
        for part in [t for pair in self.files for t in pair] + list(extra):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()


def sources() -> dict[str, Path]:
    """Every kernel source by name: this package's own, then every environment's."""
    own = {path.stem: path for path in sorted(KERNEL_DIR.glob("*.cu"))}
    return {**own, **msrl.envs.kernel_sources()}


def find_source(name: str | Path) -> Path:
    """The ``.cu`` file of the kernel source ``name`` (or ``name`` itself, a path to one)."""
    if isinstance(name, Path):
        if not name.is_file():
            raise FileNotFoundError(f"no kernel source {name}")
        return name.resolve()
    known = sources()
    if name not in known:
        raise FileNotFoundError(f"no kernel source {name!r}; available: {', '.join(sorted(known))}")
    return known[name]


def load_source(name: str | Path) -> KernelSource:
    """Read the kernel source ``name`` (see ``find_source``) and, recursively, its quoted
    includes, looked up beside it and then in ``msrl.envs.KERNEL_HEADERS``."""
    path = find_source(name)
    include_dirs = tuple(dict.fromkeys((path.parent, msrl.envs.KERNEL_HEADERS.resolve())))
    files: list[tuple[str, str]] = []
    pending, seen = [path.name], set()
    while pending:
        file_name = pending.pop(0)
        if file_name in seen:
            continue
        seen.add(file_name)
        found = next(d / file_name for d in include_dirs if (d / file_name).is_file())
        text = found.read_text()
        files.append((file_name, text))
        pending += [inc for inc in _INCLUDE.findall(text) if any((d / inc).is_file() for d in include_dirs)]
    code = _strip_comments("\n".join(text for _, text in files))
    syncing, found_functions = _barrier_functions(code)
    kernels = {}
    for match in _KERNEL.finditer(code):
        kname, params = match.group(1), match.group(2)
        parsed = tuple(_parse_param(p, kname) for p in params.split(",") if p.strip())
        # A kernel the scan could not delimit counts as using barriers (always safe).
        kernels[kname] = Kernel(kname, parsed, kname in syncing or kname not in found_functions)
    return KernelSource(path.stem, path, tuple(files), kernels, include_dirs)


def include_flags(source: KernelSource) -> list[str]:
    """``-I`` flags for ``source``'s include directories (for nvcc and the C++ compiler)."""
    return [flag for directory in source.include_dirs for flag in ("-I", str(directory))]


def normalise_defines(defines: Mapping[str, object] | None) -> dict[str, str]:
    """``{"MSRL_REAL": "double"}`` -> sorted ``{name: str(value)}``; ``None`` values mean ``-DNAME``."""
    out = {}
    for key, value in sorted((defines or {}).items()):
        if not re.fullmatch(r"[A-Za-z_]\w*", key):
            raise ValueError(f"invalid preprocessor name {key!r}")
        out[key] = "" if value is None else str(value)
    return out


def define_flags(defines: Mapping[str, str]) -> list[str]:
    return [f"-D{k}" if v == "" else f"-D{k}={v}" for k, v in defines.items()]


def real_is_double(defines: Mapping[str, str]) -> bool:
    real = defines.get("MSRL_REAL", "float")
    if real not in ("float", "double"):
        raise ValueError(f"MSRL_REAL must be 'float' or 'double', got {real!r}")
    return real == "double"


def cache_dir() -> Path:
    """Where compiled kernels go: ``$MSRL_CACHE_DIR/kernels``, else
    ``$XDG_CACHE_HOME/msrl/kernels``, else ``~/.cache/msrl/kernels``; never
    inside the package, which may be read-only or shared between checkouts."""
    if os.environ.get("MSRL_CACHE_DIR"):
        base = Path(os.environ["MSRL_CACHE_DIR"]) / "kernels"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = Path(xdg) / "msrl" / "kernels"
    base.mkdir(parents=True, exist_ok=True)
    return base


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` next to ``path`` and rename it into place, so a reader (or a
    concurrent build of the same key) never sees a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def temp_path_for(path: Path) -> Path:
    """A fresh, unique file name next to ``path`` for a compiler to write into
    before ``os.replace`` moves it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    return Path(tmp)
