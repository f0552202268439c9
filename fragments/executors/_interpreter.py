"""The interpreter over a fragment program (after torch.fx's Interpreter): ``run()`` runs one
iteration, ``run_node()`` one node, dispatched through one table keyed by ``Op`` to one method per
op.  What is measured (time per phase, environment steps, finiteness of what environments return)
is a hook around each node (``Instrumentation``), not part of the op methods.  ``Executor`` adds
what differs between executor kinds (specs, devices, threads) on top of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from fragments._program import FragmentProgram, LoopBlock, Recv
from fragments.executors._instrument import Instrumentation
from msrl.core import (
    CarryRef,
    MsrlError,
    Node,
    Op,
    Role,
    ValueRef,
    deferring,
    has_deferred,
    map_leaves,
    pending_deferred,
    resolve_deferred,
)


class FragmentExecutionError(RuntimeError):
    """A component raised while a fragment ran; the message says which node."""


class Transport(Protocol):
    """Moves node outputs between fragment replicas (the Ray one lives in ``cluster``)."""

    def send(self, node: str, value: tuple) -> None: ...

    def recv(self, step: Recv) -> tuple: ...


class Interpreter:
    """Runs one replica's fragment program over ``components`` (the live component objects of this
    replica; ``roles`` maps component name to role), exchanging values with other fragments
    through ``transport``; ``check_finite`` checks what environments return for NaN/inf."""

    def __init__(
        self,
        program: FragmentProgram,
        components: dict[str, Any],
        roles: dict[str, Role],
        replica: int = 0,
        transport: Transport | None = None,
        check_finite: bool = True,
    ) -> None:
        self.program = program
        self.components = components
        self.roles = roles
        self.replica = replica
        self.transport = transport
        if (program.sends or program.recvs()) and transport is None:
            raise ValueError(
                f"fragment {program.fragment!r} exchanges values with other fragments but has no transport"
            )
        self.values: dict[str, tuple] = {}
        self.carried: dict[str, tuple] = {}
        nodes = program.nodes()
        self._ops: dict[Op, Callable[[Node, tuple, dict], Any]] = {
            Op.CALL_COMPONENT: self.call_component,
            Op.CALL_FUNCTION: self.call_function,
            Op.OUTPUT: self.output,
        }
        """The dispatch table of ``run_node``: one method per op (a subclass overrides the method)."""
        self.instrument = Instrumentation(nodes, components, roles, check_finite=check_finite)
        self._arg_fns = {node.name: _compile_args(node) for node in nodes}
        # Values some step reads or another fragment receives: a deferred one among them is computed
        # when it is produced.  Only values nothing reads before the output may stay deferred.
        self._read_early = {ref.node for node in nodes if node.op is not Op.OUTPUT for ref, _ in node.inputs()} | set(
            program.sends
        )

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
                elif step.op is Op.OUTPUT:
                    result = self.run_node(step, first=True)
                else:
                    self._run_and_keep(step, True)
        return self._finish_deferred(result)

    def _finish_deferred(self, result: Any) -> Any:
        """Compute the output's deferred values now, after every send of the iteration."""
        for value in pending_deferred(result):
            with self.instrument.timed(value.phase):
                try:
                    value.resolve()
                except Exception as exc:
                    _reraise(
                        f"while computing a deferred value of fragment {self.program.fragment}, replica {self.replica}",
                        exc,
                    )
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
            with self.instrument.timed("communication"):
                self._linked().send(node.name, value)

    def _receive(self, step: Recv) -> None:
        """Wait for a value another fragment produces."""
        with self.instrument.timed("communication"):
            self.values[step.name] = self._linked().recv(step)

    def _linked(self) -> Transport:
        """The transport, which a fragment that sends or receives always has (``__init__`` checks)."""
        assert self.transport is not None
        return self.transport

    def run_node(self, node: Node, first: bool) -> Any:
        args, kwargs = self._arg_fns[node.name](self.values, self.carried, first)
        try:
            return self.instrument.around(node, self._ops[node.op], args, kwargs)
        except Exception as exc:
            _reraise(self._where(node), exc)

    def _where(self, node: Node) -> str:
        return (
            f"while executing node {node.name} of fragment {self.program.fragment}, replica {self.replica} "
            f"(traced at {node.site})"
        )

    # -- one method per op ---------------------------------------------------
    def call_component(self, node: Node, args: tuple, kwargs: dict) -> tuple:
        component, method = node.target
        result = getattr(self.components[component], method)(*args, **kwargs)
        if node.name in self._read_early and has_deferred(result):
            result = resolve_deferred(result)  # needed before the iteration ends: computed now
        return result if node.meta.get("tuple") else (result,)

    def call_function(self, node: Node, args: tuple, kwargs: dict) -> tuple:
        return (node.target(*args, **kwargs),)

    def output(self, node: Node, args: tuple, kwargs: dict) -> Any:
        return args[0]

    def take_stats(self) -> tuple[dict[str, float], int]:
        """Phase timings and env steps since the last call."""
        return self.instrument.take()


def _reraise(where: str, exc: Exception) -> NoReturn:
    """Re-raise ``exc`` with where it happened: an msrl error as its own type (one clean
    line for the CLI), anything else as a ``FragmentExecutionError``, the original chained."""
    if isinstance(exc, MsrlError):
        raise type(exc)(f"{where}: {exc}") from exc
    raise FragmentExecutionError(f"{where}: {type(exc).__name__}: {exc}") from exc


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
