"""A compiled region built ahead of time on the CPU: traced in the process that runs it, built into
a shared library by AOTInductor in a process of its own, kept on disk, and loaded in milliseconds
by every later run.

``torch.compile`` on the CPU leaves two costs a small RL step cannot afford: every call goes
through Dynamo's guards and inductor's Python wrapper, and every run traces the step again before
it finds inductor's cache.  AOTInductor writes the wrapper in C++ as well, and its package loads
without tracing.

Tracing (``make_fx`` on fake tensors, a fraction of a second) happens here, because it needs the
live function; the traced graph names the package (its code and constants, the arguments'
layout, torch's version, the CPU and the thread count: ``package_path``), so a package on disk is
found without building anything.  Building (export, code generation, the C++ compiler: 20-40 s on
two cores) happens in a separate Python process (``Build``), started with this file as its
program: training goes on meanwhile, and a build the run does not wait for finishes, and fills the
cache, even after the run has ended.  Builds on one machine take turns (``_build_process``), so
many runs starting at once do not start many compilers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

BUILD_THREADS = 1
"""Threads of a build process's own work (inductor's compile workers): one core, beside a run."""


@contextlib.contextmanager
def _compiling() -> Iterator[None]:
    """``torch.compiler.is_compiling()`` true, as ``torch.export`` and ``torch.compile`` hold it while
    they trace: torch's functional optimizers then take their tensor-only (capturable) path, with
    no host sync for the step count and no device check that only a GPU would pass."""
    before = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = before


def trace(fn: Callable[..., Any], args: tuple[Any, ...]) -> torch.fx.GraphModule:
    """``fn`` on ``args`` as a graph of aten operations (``make_fx`` on fake tensors), taking the
    tensors of ``args`` flattened.  Tracing through ``torch.func.grad`` works here, where
    ``torch.export`` alone cannot differentiate inside its trace."""
    from torch.fx.experimental.proxy_tensor import make_fx

    leaves, spec = pytree.tree_flatten(args)
    if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise TypeError("a compiled region takes tensors only")

    def flat(*tensors: torch.Tensor) -> Any:
        out = fn(*pytree.tree_unflatten(list(tensors), spec))
        return () if out is None else out

    with _compiling():
        return make_fx(flat, tracing_mode="fake")(*leaves)


@cache
def _platform_digest() -> str:
    """What the generated code depends on beyond the graph itself."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        flags = platform.processor()
    parts = (torch.__version__, sys.version, platform.machine(), flags)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _layout(leaf: torch.Tensor) -> tuple[Any, ...]:
    return tuple(leaf.shape), leaf.stride(), leaf.dtype, str(leaf.device)


def _arguments_digest(args: tuple[Any, ...]) -> str:
    leaves, spec = pytree.tree_flatten(args)
    parts = [str(spec), str(torch.get_num_threads())]
    parts += [repr(_layout(leaf)) if isinstance(leaf, torch.Tensor) else repr(leaf) for leaf in leaves]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _graph_digest(graph: torch.fx.GraphModule) -> str:
    """The traced region: its code and the values of the constants it reads."""
    digest = hashlib.sha256(graph.code.encode())
    for node in graph.graph.nodes:
        if node.op == "get_attr":
            value = getattr(graph, node.target)
            digest.update(str(node.target).encode())
            if isinstance(value, torch.Tensor):
                digest.update(str((value.dtype, tuple(value.shape))).encode())
                digest.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def package_path(directory: Path, graph: torch.fx.GraphModule, args: tuple[Any, ...]) -> Path:
    """Where the package of ``graph`` traced on ``args`` lives in ``directory``."""
    parts = (_graph_digest(graph), _arguments_digest(args), _platform_digest())
    return directory / f"{hashlib.sha256(''.join(parts).encode()).hexdigest()[:32]}.pt2"


@cache
def _directory_digest(directory: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def sources_digest(modules: Iterable[str]) -> str:
    """The sources of ``modules``: every Python file beside each one (its package's own files, so a
    helper it imports from the same package counts), torch's left to its version."""
    torch_dir = Path(torch.__file__).parent
    directories = set()
    for name in modules:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file is None:
            raise ValueError(f"a named region's module {name!r} has no source file to key it by")
        if torch_dir not in Path(file).resolve().parents:
            directories.add(str(Path(file).resolve().parent))
    return hashlib.sha256("".join(_directory_digest(d) for d in sorted(directories)).encode()).hexdigest()


def named_package_path(directory: Path, name: str, modules: Iterable[str], args: tuple[Any, ...]) -> Path:
    """Where the package of a region named ``name`` by its owner lives: the name (what fixes the
    region's constants, e.g. an algorithm's config and its network's structure), the sources of the
    modules whose code it runs, the arguments' layout and the platform.  Found without a trace."""
    parts = ("named", name, sources_digest(modules), _arguments_digest(args), _platform_digest())
    return directory / f"{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:32]}.pt2"


def flat_tensors(tree: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors of ``tree`` in pytree order (``pytree.tree_leaves``, which costs more than a
    small step's arithmetic): tuples, named tuples and lists in order, dicts by their values."""
    if isinstance(tree, torch.Tensor):
        out.append(tree)
    elif isinstance(tree, (tuple, list)):
        for item in tree:
            if isinstance(item, torch.Tensor):  # most items: no call for them
                out.append(item)
            else:
                flat_tensors(item, out)
    elif isinstance(tree, dict):
        for item in tree.values():
            flat_tensors(item, out)
    else:  # anything else pytree knows is not a tensor here: flatten it the slow way
        out.extend(leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor))
    return out


class Runner:
    """A loaded package, called with the region's arguments.  ``torch._inductor``'s own wrapper
    parses the call's pytree specification again at every call (and importing it costs a second
    or more); this keeps the parsed output specification, and returns a flat tuple of outputs as
    it is."""

    def __init__(self, path: Path) -> None:
        # run_single_threaded: each region is called from one thread at a time
        self.loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", True, 1, -1)
        self.out_spec = pytree.treespec_loads(self.loader.get_call_spec()[1])
        children = [self.out_spec.child(i) for i in range(self.out_spec.num_children)]
        self.flat_tuple = self.out_spec.type is tuple and all(child.is_leaf() for child in children)

    def __call__(self, *args: Any) -> Any:
        return self.leaves(flat_tensors(args, []))

    def leaves(self, tensors: list[torch.Tensor]) -> Any:
        """The call on the arguments' tensors already flattened in pytree order (a new list each
        call: the package takes it over)."""
        outputs = self.loader.boxed_run(tensors)
        out = tuple(outputs) if self.flat_tuple else pytree.tree_unflatten(outputs, self.out_spec)
        return None if isinstance(out, (tuple, list)) and not out else out


class TracedRunner:
    """The traced graph itself run as Python: the region's arithmetic exactly as it would be
    built, without code generation (seconds instead of tens), for tests."""

    def __init__(self, graph: torch.fx.GraphModule) -> None:
        self.graph = graph

    def __call__(self, *args: Any) -> Any:
        return self.leaves(flat_tensors(args, []))

    def leaves(self, tensors: list[torch.Tensor]) -> Any:
        """The call on the arguments' tensors already flattened in pytree order."""
        out = self.graph(*tensors)
        return None if isinstance(out, (tuple, list)) and not out else out


class Build:
    """The package of ``graph`` (traced on ``args``) being built at ``path`` by a separate Python
    process.  ``background``: a build the run does not wait for, which runs only on cores nothing
    else wants (``_build_process.yield_to_training``).  Its output goes to a log beside the package,
    where a failure's reason is read."""

    def __init__(
        self, graph: torch.fx.GraphModule, args: tuple[Any, ...], path: Path, background: bool = False
    ) -> None:
        self.path, self.log = path, path.with_name(f"{path.stem}.{os.getpid()}.log")
        self.started = time.monotonic()
        leaves = pytree.tree_leaves(args)
        request = {
            "graph": graph,
            "leaves": [_layout(leaf) for leaf in leaves],
            "threads": torch.get_num_threads(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        environment = {
            **os.environ,
            "TORCHINDUCTOR_COMPILE_THREADS": str(BUILD_THREADS),
            "MSRL_BUILD_PRIORITY": "idle" if background else "normal",
        }
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("_build_process.py")), str(path), str(self.log)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,  # a build outlives its run, and a Ctrl-C aimed at the run
            )
        assert self.process.stdin is not None
        with self.process.stdin:
            self.process.stdin.write(pickle.dumps(request))

    def done(self) -> bool:
        """Whether the process has ended (built, or failed: ``error`` says)."""
        return self.process.poll() is not None

    def wait(self) -> None:
        self.process.wait()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def error(self) -> str | None:
        """Why the build failed (the last line its process wrote; the whole of it in ``log``), or
        None where it built the package."""
        if self.process.poll() == 0 and self.path.exists():
            return None
        try:
            lines = [line.strip() for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            lines = []
        return lines[-1][:200] if lines else f"the build process exited with {self.process.returncode}"
