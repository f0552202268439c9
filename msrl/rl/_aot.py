"""A compiled step built ahead of time on the CPU: exported once, compiled to a shared library by
AOTInductor, kept on disk, and loaded in milliseconds by every later run.

``torch.compile`` on the CPU leaves two costs a small RL step cannot afford.  Every call goes
through Dynamo's guards and inductor's Python wrapper, which calls each generated kernel and each
matmul from Python: at PPO's CartPole shapes that is about half of a 0.8 ms minibatch step.  And
every run traces the step again before it finds inductor's cache (3-6 s).  AOTInductor writes the
wrapper in C++ as well, and its package needs no tracing to load: PPO's update at the shipped
shapes runs in about 12 ms against 26 ms under ``torch.compile``, the arithmetic's floor on these
cores (benchmarks in ``BENCHMARKS.md``, "The compiled learner").

A package is found again by a key: what the caller says fixes the step's code and constants (for
PPO, its frozen step configuration), the sources of ``msrl.rl``, the shapes, dtypes, strides and
devices of the arguments, torch's and Python's versions, the CPU's instruction-set flags and
torch's thread count (the generated code is specialised on both).  Without a key from the caller
the exported graph itself, with its constants, is the key, which costs a trace per run but can
never load a stale step.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree


def _trace(fn: Callable[..., Any], args: tuple[Any, ...]) -> torch.fx.GraphModule:
    """``fn`` on ``args`` as a graph of aten operations (``make_fx`` on fake tensors), taking the
    tensors of ``args`` flattened.  Tracing through ``torch.func.grad`` (the func steps' gradient)
    works here, where ``torch.export`` alone cannot differentiate inside its trace."""
    from torch.fx.experimental.proxy_tensor import make_fx

    leaves, spec = pytree.tree_flatten(args)
    if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise TypeError("a step built ahead of time takes tensors only")

    def flat(*tensors: torch.Tensor) -> Any:
        out = fn(*pytree.tree_unflatten(list(tensors), spec))
        return () if out is None else out

    return make_fx(flat, tracing_mode="fake")(*leaves)


@cache
def _platform_digest() -> str:
    """What the generated code depends on beyond the step itself."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        flags = platform.processor()
    parts = (torch.__version__, sys.version, platform.machine(), flags)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@cache
def _sources_digest() -> str:
    """The sources of ``msrl.rl``, whose functions a keyed step traces."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _arguments_digest(args: tuple[Any, ...]) -> str:
    leaves, spec = pytree.tree_flatten(args)
    parts = [str(spec), str(torch.get_num_threads())]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append(f"{tuple(leaf.shape)}/{leaf.stride()}/{leaf.dtype}/{leaf.device}/{leaf.requires_grad}")
        else:
            parts.append(repr(leaf))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _graph_digest(graph: torch.fx.GraphModule) -> str:
    """The traced step: its code and the values of the constants it reads."""
    digest = hashlib.sha256(graph.code.encode())
    for node in graph.graph.nodes:
        if node.op == "get_attr":
            value = getattr(graph, node.target)
            digest.update(str(node.target).encode())
            if isinstance(value, torch.Tensor):
                digest.update(str((value.dtype, tuple(value.shape))).encode())
                digest.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def package_path(directory: Path, *parts: str) -> Path:
    return directory / f"{hashlib.sha256(''.join(parts).encode()).hexdigest()[:32]}.pt2"


def _tensors(tree: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors of ``tree`` in pytree order (``pytree.tree_leaves``, which costs more than a
    small step's arithmetic): tuples, named tuples and lists in order, dicts by their values."""
    if isinstance(tree, torch.Tensor):
        out.append(tree)
    elif isinstance(tree, (tuple, list)):
        for item in tree:
            if isinstance(item, torch.Tensor):  # most items: no call for them
                out.append(item)
            else:
                _tensors(item, out)
    elif isinstance(tree, dict):
        for item in tree.values():
            _tensors(item, out)
    else:  # anything else pytree knows is not a tensor here: flatten it the slow way
        out.extend(leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor))
    return out


class _Runner:
    """A loaded package, called with the tensors of the exported arguments in pytree order.
    ``torch._inductor``'s own wrapper parses the call's pytree specification again at every call
    (and importing it costs a second or more); this keeps the parsed output specification, and
    returns a flat tuple of outputs as it is."""

    def __init__(self, path: Path) -> None:
        # run_single_threaded: each learner calls its step from one thread at a time
        self.loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", True, 1, -1)
        self.out_spec = pytree.treespec_loads(self.loader.get_call_spec()[1])
        children = [self.out_spec.child(i) for i in range(self.out_spec.num_children)]
        self.flat_tuple = self.out_spec.type is tuple and all(child.is_leaf() for child in children)

    def __call__(self, *args: Any) -> Any:
        outputs = self.loader.boxed_run(_tensors(args, []))
        return tuple(outputs) if self.flat_tuple else pytree.tree_unflatten(outputs, self.out_spec)


class AheadOfTimeStep:
    """``fn`` exported and compiled by AOTInductor at its first call, or loaded from ``directory``
    where an earlier run left it.  Later calls run the package: no guards, no Python between the
    kernels.  ``fn`` must be whole (no graph break) and free of host syncs; a random op inside it
    would draw from torch's default generator, not from a learner's own, so the learners draw
    their noise outside the step and pass it in (SAC)."""

    def __init__(self, fn: Callable[..., Any], directory: Path, key: str | None) -> None:
        self.fn, self.directory, self.key = fn, directory, key
        self.runner: _Runner | None = None
        self.path: Path | None = None

    def _build(self, args: tuple[Any, ...]) -> _Runner:
        from torch._inductor import aoti_compile_and_package

        graph = None
        if self.key is None:  # the traced graph is the key: trace first
            graph = _trace(self.fn, args)
            path = package_path(self.directory, _graph_digest(graph), _arguments_digest(args), _platform_digest())
        else:
            code = (self.key, _sources_digest())
            path = package_path(self.directory, *code, _arguments_digest(args), _platform_digest())
        if not path.exists():
            if graph is None:
                graph = _trace(self.fn, args)
            program = torch.export.export(graph, tuple(pytree.tree_leaves(args)), strict=False)
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(suffix=".pt2", dir=self.directory)
            os.close(fd)
            try:  # another process building the same step meanwhile writes the same bytes
                aoti_compile_and_package(program, package_path=partial)
                os.replace(partial, path)
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)
        self.path = path
        return _Runner(path)

    def prepare(self, args: tuple[Any, ...]) -> None:
        """Load or build the package for ``args``' layout (the first call does it otherwise)."""
        if self.runner is None:
            self.runner = self._build(args)

    def __call__(self, *args: Any) -> Any:
        self.prepare(args)
        assert self.runner is not None
        out = self.runner(*args)
        return None if isinstance(out, (tuple, list)) and not out else out
