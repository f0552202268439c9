"""The executor base: an interpreter over a fragment program (after torch.fx's
Interpreter).  ``run()`` runs one iteration, ``run_node()`` one node, and there
is one method per op; an executor kind overrides only what differs.

Every component call is timed into a phase (env / inference / learn / buffer)
so each run reports where its time went.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NoReturn, Protocol

import numpy as np
import torch

from msrl import ConfigError, EnvError, MsrlError
from msrl._deferred import Deferred, deferring, has_deferred, pending_deferred, resolve_deferred
from msrl._graph import CarryRef, Node, ValueRef, map_leaves
from fragments._program import FragmentProgram, LoopBlock, Recv
from policies import FragmentSpec

PHASE_OF_ROLE = {"env": "env", "actor": "inference", "learner": "learn", "buffer": "buffer", "component": "other"}


class FragmentExecutionError(RuntimeError):
    """A component raised while a fragment ran; the message says which node."""


class Transport(Protocol):
    """Moves node outputs between fragment replicas (the Ray one lives in ``cluster``)."""

    def send(self, node: str, value: tuple) -> None: ...

    def recv(self, step: Recv) -> tuple: ...


class Executor:
    """Runs one replica of one fragment.

    ``components`` are the live component objects of this replica; ``roles``
    maps component name to role.  Subclasses set up threads or devices in
    ``setup`` and may override ``call_component``.
    """

    kind = "base"
    check_env_outputs = True

    def __init__(
        self,
        program: FragmentProgram,
        components: dict[str, Any],
        roles: dict[str, str],
        spec: FragmentSpec,
        replica: int = 0,
        transport: Transport | None = None,
    ) -> None:
        self.program = program
        self.components = components
        self.roles = roles
        self.spec = spec
        self.replica = replica
        self.transport = transport
        if (program.sends or program.recvs()) and transport is None:
            raise ValueError(f"fragment {program.fragment!r} exchanges values with other fragments but has no transport")
        self.values: dict[str, tuple] = {}
        self.carried: dict[str, tuple] = {}
        self.timings: dict[str, float] = {}
        self.env_steps = 0
        self._arg_fns = {node.name: _compile_args(node) for node in program.nodes()}
        # Values some step reads or another fragment receives: a deferred one among them is computed
        # when it is produced.  Only values nothing reads before the output may stay deferred.
        self._read_early = {ref.node for node in program.nodes() if node.op != "output"
                            for ref, _ in node.inputs()} | set(program.sends)

    @classmethod
    def check_available(cls, spec: FragmentSpec) -> None:
        """Raise ``ConfigError`` with one line if this machine cannot run ``spec``
        (no GPU, no pycuda), before any component is built."""
        try:
            device = torch.device(spec.device)
        except RuntimeError as exc:
            raise ConfigError(f"fragment {spec.name!r}: invalid torch device {spec.device!r}; valid choices: cpu, cuda, cuda:N") from exc
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"fragment {spec.name!r} asks for device {spec.device!r} but torch sees no CUDA GPU; use device=cpu")

    def setup(self) -> None:
        """Prepare threads/devices; called once before the first ``run``."""

    def close(self) -> None:
        """Release threads/devices."""

    # -- interpretation ---------------------------------------------------
    def run(self) -> Any:
        """Run one iteration of the fragment; return the output node's value (if this fragment holds it)."""
        self.values = {}
        result = None
        with deferring():
            for step in self.program.steps:
                if isinstance(step, LoopBlock):
                    self.run_loop(step)
                elif isinstance(step, Recv):
                    self._receive(step)
                else:
                    result = self.run_node(step, first=True) if step.op == "output" else self._run_and_keep(step, True)
        return self._finish_deferred(result)

    def _finish_deferred(self, result: Any) -> Any:
        """Compute the output's deferred values now, after every send of the iteration,
        timing each into the phase of the component that returned it."""
        for value in pending_deferred(result):
            start = time.perf_counter()
            try:
                value.resolve()
            except Exception as exc:
                _reraise(f"while computing a deferred value of fragment {self.program.fragment}, "
                         f"replica {self.replica}", exc)
            self.timings[value.phase] = self.timings.get(value.phase, 0.0) + time.perf_counter() - start
        return resolve_deferred(result)

    def run_loop(self, block: LoopBlock) -> None:
        for iteration in range(block.region.trip_count):
            first = iteration == 0
            if not first:
                self.carried = {name: self.values[name] for name in block.carried}
            for node in block.body:
                if isinstance(node, Recv):
                    self._receive(node)
                else:
                    self._run_and_keep(node, first)

    def _run_and_keep(self, node: Node, first: bool) -> None:
        value = self.values[node.name] = self.run_node(node, first)
        if node.name in self.program.sends:
            start = time.perf_counter()
            self.transport.send(node.name, value)
            self.timings["communication"] = self.timings.get("communication", 0.0) + time.perf_counter() - start

    def _receive(self, step: Recv) -> None:
        """Wait for a value another fragment produces; the wait counts as communication time."""
        start = time.perf_counter()
        self.values[step.name] = self.transport.recv(step)
        self.timings["communication"] = self.timings.get("communication", 0.0) + time.perf_counter() - start

    def run_node(self, node: Node, first: bool) -> Any:
        args, kwargs = self._arg_fns[node.name](self.values, self.carried, first)
        try:
            return getattr(self, node.op)(node, args, kwargs)
        except Exception as exc:
            _reraise(self._where(node), exc)

    def _where(self, node: Node) -> str:
        return f"while executing node {node.name} of fragment {self.program.fragment}, replica {self.replica} (traced at {node.site})"

    # -- one method per op ---------------------------------------------------
    def call_component(self, node: Node, args: tuple, kwargs: dict) -> tuple:
        component = self.components[node.component]
        role = self.roles[node.component]
        start = time.perf_counter()
        result = getattr(component, node.method)(*args, **kwargs)
        phase = PHASE_OF_ROLE[role]
        if node.name in self._read_early:
            if has_deferred(result):  # needed before the iteration ends: computed now, in this call's phase
                result = resolve_deferred(result)
        elif type(result) is Deferred:
            result.phase = phase
        self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - start
        if role == "env" and node.method == "step":
            self.env_steps += component.num_envs
            if self.check_env_outputs:
                check_finite(result, node.component)
        return result if node.meta.get("tuple") else (result,)

    def call_function(self, node: Node, args: tuple, kwargs: dict) -> tuple:
        return (node.target(*args, **kwargs),)

    def output(self, node: Node, args: tuple, kwargs: dict) -> Any:
        return args[0]

    def take_stats(self) -> tuple[dict[str, float], int]:
        """Phase timings and env steps since the last call."""
        timings, steps = self.timings, self.env_steps
        self.timings, self.env_steps = {}, 0
        return timings, steps


def _reraise(where: str, exc: Exception) -> NoReturn:
    """Re-raise ``exc`` with where it happened: an msrl error as its own type (one clean
    line for the CLI), anything else as a ``FragmentExecutionError``, the original chained."""
    if isinstance(exc, MsrlError):
        raise type(exc)(f"{where}: {exc}") from exc
    raise FragmentExecutionError(f"{where}: {type(exc).__name__}: {exc}") from exc


def check_finite(values: Any, component: str) -> None:
    """Reject NaN/inf in an environment's step outputs: training on them silently ruins the run."""
    for index, value in enumerate(values if isinstance(values, tuple) else (values,)):
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            ok = bool(np.isfinite(value).all())
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            ok = bool(torch.isfinite(value).all())
        else:
            continue
        if not ok:
            name = ("obs", "reward", "terminated", "truncated")[index] if index < 4 else f"output {index}"
            raise EnvError(f"environment {component!r} returned a non-finite {name} (NaN or inf); fix the environment or its inputs")


def _compile_args(node: Node) -> Callable[[dict, dict, bool], tuple[tuple, dict]]:
    """Build a fast argument resolver for a node, once, instead of walking its
    argument tree generically every step.  A carried value comes from the
    iteration-start snapshot ``carried``, except on the first iteration."""

    def resolve(leaf: Any, values: dict, carried: dict, first: bool) -> Any:
        if isinstance(leaf, ValueRef):
            return values[leaf.node][leaf.index]
        if isinstance(leaf, CarryRef):
            if first:
                return resolve(leaf.init, values, carried, first)
            return carried[leaf.update.node][leaf.update.index]
        return leaf

    flat = all(not isinstance(a, (tuple, list, dict)) for a in node.args) and not node.kwargs
    if flat:
        args = node.args

        def fast(values: dict, carried: dict, first: bool) -> tuple[tuple, dict]:
            return tuple([resolve(a, values, carried, first) for a in args]), {}

        return fast

    def general(values: dict, carried: dict, first: bool) -> tuple[tuple, dict]:
        fn = lambda leaf: resolve(leaf, values, carried, first)  # noqa: E731
        return map_leaves(fn, node.args), map_leaves(fn, node.kwargs)

    return general
