"""Compiled regions: a function of tensors compiled whole, built without holding training up.

At the sizes of small RL networks on the CPU a gradient step or an actor's draw is a few hundred
microseconds of arithmetic behind a millisecond of Python and dispatcher overhead.  A region (the
whole minibatch step: forward, loss, backward, clip, optimiser; or an actor's forward pass and
draw) becomes one generated kernel set with fixed shapes: on the CPU built ahead of time by
AOTInductor (``msrl.rl._aot``), on CUDA ``torch.compile(fullgraph=True, mode="reduce-overhead")``,
replayed as a CUDA graph.  That needs a region without host syncs (``.item()``, ``.cpu()``, Python
branches on tensor values) and without data-dependent shapes, which the tests check on the CPU,
so a region stays capture-ready without a GPU.

``algo.compile`` says when a region's owner (``msrl.rl.GradientStep``, ``msrl.rl.CompiledCall``)
switches from its eager code to the region:

* ``auto`` (the default): at the first call the region is traced (a fraction of a second) and
  looked up in the cache; if an earlier run built it, it runs compiled from that call on.
  Otherwise its package is built by a separate process, on the cores training leaves idle, while
  the owner goes on eagerly, and ``switch_compiled``, which the run calls between iterations, switches it once
  built.  Nothing waits for the compiler.
* ``true``: the first call waits for the build (benchmarks that want the compiled step throughout).
* ``false``: eager always.

The environment variable ``MSRL_COMPILE`` (``auto``, ``true`` or ``false``) says what ``auto``
means in this process and the processes it starts: ``MSRL_COMPILE=false`` keeps every default run
eager (the test suite does, so its runs repeat bit for bit), ``MSRL_COMPILE=true`` makes them wait
for their compiled steps.  An explicit ``true`` or ``false`` in a config stands.

Eager and compiled run the same Python code on the same tensors (parameters, optimiser state,
generators), so a switch changes nothing but the speed.  Packages are cached on disk; unless
``TORCHINDUCTOR_CACHE_DIR`` says otherwise, in the user's cache directory
(``$XDG_CACHE_HOME/msrl/torchinductor``, by default ``~/.cache/msrl/torchinductor``), the CPU's
packages in its ``aoti`` folder.  On CUDA a region compiles at its first call, in the process and
thread that replay its CUDA graphs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

from msrl.core import ConfigError
from msrl.rl._aot import Build, Runner, TracedRunner, named_package_path, package_path, trace

COMPILE_CHOICES = ("auto", "true", "false")
"""What ``algo.compile`` takes (YAML's booleans too, as ``true`` and ``false``)."""


def compile_option(value: Any) -> str:
    """``value`` as one of ``COMPILE_CHOICES``, or a ``ConfigError`` naming them."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str) and value in COMPILE_CHOICES:
        return value
    raise ConfigError(f"algo.compile must be one of: {', '.join(COMPILE_CHOICES)}; got {value!r}")


COMPILE_ENV = "MSRL_COMPILE"
"""The environment variable that says what ``auto`` means (see the module's docstring)."""


def resolve_compile_option(value: Any) -> str:
    """``compile_option(value)``, with ``auto`` read as ``MSRL_COMPILE`` says where it is set."""
    option = compile_option(value)
    if option == "auto" and os.environ.get(COMPILE_ENV):
        override = os.environ[COMPILE_ENV]
        if override not in COMPILE_CHOICES:
            choices = ", ".join(COMPILE_CHOICES)
            raise ConfigError(f"the environment variable {COMPILE_ENV} must be one of: {choices}; got {override!r}")
        return override
    return option


def region_key(config: Any) -> str:
    """The name an algorithm gives its compiled regions: its config (what fixes every constant its
    losses read), less the ``compile`` option, which says when the compiled form runs and not what
    it computes, so a run under ``compile: true`` and the next under ``auto`` share packages."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        if any(field.name == "compile" for field in dataclasses.fields(config)):
            config = dataclasses.replace(config, compile="auto")
    return repr(config)


def check_compile_option(value: Any) -> None:
    """Raise ``ConfigError`` unless ``value`` is an ``algo.compile`` choice (``compile_option``)."""
    compile_option(value)


def inductor_cache_dir() -> Path:
    """Where compiled regions are cached between runs, unless ``TORCHINDUCTOR_CACHE_DIR`` is set."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "msrl" / "torchinductor"


def use_inductor_cache_dir() -> Path:
    """Point inductor's cache at ``inductor_cache_dir()`` unless the user chose one, and return it.
    Importing ``torch._dynamo`` (which more than torch.compile does) writes inductor's default, under
    the temporary directory, into ``TORCHINDUCTOR_CACHE_DIR``, so that value counts as unset;
    inductor reads the variable again at each compile."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current is None or os.path.abspath(current) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache_dir())
    return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])


_REPORTED: set[str] = set()
"""The reasons this process has said a region could not be built for: each is said once."""


def report_failure(error: BaseException | str, log: Path | None = None) -> None:
    """Say in one line (once per reason) that a region could not be built and runs eagerly."""
    text = str(error).strip()
    reason = text.splitlines()[0][:300] if text else type(error).__name__
    if reason not in _REPORTED:  # one line for the run, not one per region
        _REPORTED.add(reason)
        where = f"; the build's log: {log}" if log is not None else ""
        print(f"msrl: a compiled step could not be built ({reason}{where}); running it eagerly", file=sys.stderr)


_BUILDING: weakref.WeakSet[CompiledRegion] = weakref.WeakSet()
"""The regions of this process whose packages are being built."""
_BUILDS: list[Build] = []
"""Every build this process started and has not seen end, whether or not its region is still
alive: a build process is waited for (not left a zombie) once it ends."""
_ANNOUNCED: set[str] = set()
"""The region names a waiting build has been announced for, so each is said once."""


class CompiledRegion:
    """``fn`` compiled whole (a graph break is an error, not a slow path) with static shapes, for
    an owner that runs ``fn``'s eager equivalent until ``ready``.

    The owner calls ``start(*args)`` with its first call's arguments (what decides the shapes),
    then calls the region while ``ready``.  ``name`` is what the run's messages call it (``learner``,
    ``actor``).  ``cuda_graphs=False`` keeps a region eager on CUDA (an actor's outputs outlive the
    next replay, which overwrites a CUDA graph's).  ``backend="traced"`` runs the traced graph as
    Python instead of building it: the same arithmetic in seconds, for tests.

    A package is found by the region's traced graph, which costs a trace (a fraction of a second)
    at every run's first call.  An owner that can say what fixes the region's code and constants
    names it instead: ``key`` (e.g. an algorithm's config and its network's structure) and
    ``modules``, the modules whose code the region runs (their packages' sources enter the name);
    a named region is found without a trace.  The name must change whenever what the region
    computes does, so only owners that know everything their function reads name it.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        compile: Any = "auto",
        name: str = "step",
        cuda_graphs: bool = True,
        backend: str = "inductor",
        key: str | None = None,
        modules: Iterable[str] = (),
    ) -> None:
        self.fn, self.name, self.cuda_graphs, self.backend = fn, name, cuda_graphs, backend
        self.key, self.modules = key, (*modules, "msrl.rl", "msrl.core")
        self.option = resolve_compile_option(compile)
        self.started = self.option == "false"  # nothing to start when it stays eager
        self.runner: Callable[..., Any] | None = None
        self.build: Build | None = None
        self.build_seconds = 0.0

    @property
    def ready(self) -> bool:
        return self.runner is not None

    @property
    def building(self) -> bool:
        return self.build is not None

    def start(self, *args: Any) -> None:
        """Trace on ``args`` and load the package from the cache, or have it built (waiting for it
        under ``algo.compile: true``); where that fails, one line says why and the owner stays eager."""
        if self.started:
            return
        self.started = True
        try:
            device = next(
                leaf.device for leaf in torch.utils._pytree.tree_leaves(args) if isinstance(leaf, torch.Tensor)
            )
            if device.type == "cuda":
                if self.cuda_graphs:
                    self._compile_cuda_graphs()
                return
            directory = use_inductor_cache_dir() / "aoti"
            named = None
            if self.key is not None and self.backend != "traced":
                named = named_package_path(directory, self.key, self.modules, args)
                if named.exists():
                    self.runner = Runner(named)
                    return
            graph = trace(self.fn, args)
            if self.backend == "traced":
                self.runner = TracedRunner(graph)
                return
            path = named or package_path(directory, graph, args)
            if path.exists():
                self.runner = Runner(path)
                return
            self.build = Build(graph, args, path, background=self.option == "auto")
            _BUILDING.add(self)
            _BUILDS.append(self.build)
        except Exception as error:  # noqa: BLE001 - whatever stops the build, the owner runs eagerly
            report_failure(error)
            return
        if self.option == "true":
            if self.name not in _ANNOUNCED:  # one line per name, however many regions share it
                _ANNOUNCED.add(self.name)
                print(f"msrl: building the compiled {self.name} (algo.compile: true waits for it)", file=sys.stderr)
            self.build.wait()
            self.finish()

    def finish(self) -> bool:
        """Load the package the build left, where it has finished: whether the region is now ready."""
        build = self.build
        if build is None or not build.done():
            return False
        self.build, self.build_seconds = None, build.seconds
        _BUILDING.discard(self)
        error = build.error()
        if error is not None:
            report_failure(error, build.log)
            return False
        try:
            self.runner = Runner(build.path)
        except Exception as load_error:  # noqa: BLE001 - a package that does not load: stay eager
            report_failure(load_error)
        return self.runner is not None

    def _compile_cuda_graphs(self) -> None:
        use_inductor_cache_dir()
        compiled = torch.compile(self.fn, fullgraph=True, dynamic=False, mode="reduce-overhead")
        # The outputs are the graph's own memory, which the next replay overwrites, so they are
        # copied (metrics, a gradient for the all-reduce: small) before the caller keeps them.
        self.runner = lambda *args: tree_map_only(torch.Tensor, torch.clone, compiled(*args))

    def __call__(self, *args: Any) -> Any:
        assert self.runner is not None, "call a region once it is ready"
        return self.runner(*args)


def switch_compiled() -> tuple[tuple[str, float], ...]:
    """Switch every region of this process whose build has finished, and say which (its name and
    the seconds its build took).  The run calls it between iterations, so a learner's update and
    an actor's rollout each run one way from start to end."""
    _BUILDS[:] = [build for build in _BUILDS if not build.done()]
    return tuple((region.name, region.build_seconds) for region in list(_BUILDING) if region.finish())


def wait_for_builds() -> None:
    """Wait until every build this process started has ended (each has then filled the cache, or
    failed): for a script that wants the next run compiled from its start, or a machine quiet again."""
    for build in list(_BUILDS):
        build.wait()
    _BUILDS.clear()


def compiling() -> tuple[str, ...]:
    """The names of this process's regions whose packages are still being built."""
    return tuple(sorted({region.name for region in _BUILDING}))


def keep_in_place(tensors: Iterable[torch.Tensor]) -> None:
    """Mark the tensors a CUDA-graph region updates in place (parameters, optimiser state) as
    keeping their address from call to call: CUDA graphs then record them where they are, where
    they would otherwise skip a graph whose inputs it mutates."""
    for tensor in tensors:
        torch._dynamo.mark_static_address(tensor)
