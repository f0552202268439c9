"""Tracing ``train_step`` into a ``DataflowGraph``.

The tracer runs ``train_step`` once with proxies instead of data: each
component-method call records a node and returns proxies for its results.
Nothing real is computed, so tracing has no side effects (no env steps, no
gradient updates) and is deterministic.  ``msrl.steps(n)`` runs its body twice
while tracing; comparing the two iterations reveals which values are carried
from one iteration to the next.  Anything that would need real data (an ``if``
on a traced value, arithmetic outside a component) raises a ``TraceError``
naming the user's file and line; so does state kept outside components (a
counter, a list appended to, a random draw), which would be frozen at its
value while tracing (``HiddenStateError``, see "hidden state" below).
"""

from __future__ import annotations

import dis
import inspect
import linecache
import operator
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

from msrl.core import _components
from msrl.core._build import Declared, component_class
from msrl.core._components import Batched, Component, Global, NoValue
from msrl.core._errors import ControlFlowError, TraceError, UndeclaredComponentError, UnsupportedOperationError
from msrl.core._graph import CarryRef, DataflowGraph, Node, ValueRef, iter_leaves, map_leaves
from msrl.core._hidden_state import freeze, watching_draws
from msrl.core._loops import fold_loops
from msrl.core._sites import algorithm_code, code_kind, format_location, format_site, user_call, user_frame, user_site
from msrl.core._vocab import Op, Role, ValueKind

_CONSTANTS = (int, float, str, bool, type(None))
_ROLES: tuple[tuple[type[Component], Role], ...] = (
    (_components.Environment, Role.ENV),
    (_components.Actor, Role.ACTOR),
    (_components.Buffer, Role.BUFFER),
    (_components.Learner, Role.LEARNER),
)


def role_of(component: Component | Declared) -> Role:
    """The component's ``Role`` from its base class (built or declared); ``Role.COMPONENT`` for none of them."""
    kind = component_class(component)
    for cls, role in _ROLES:
        if issubclass(kind, cls):
            return role
    return Role.COMPONENT


def output_kinds(component: Component, method: str) -> tuple[tuple[ValueKind, ...] | None, bool]:
    """Kinds of the values ``method`` returns and whether it returns a tuple,
    read from the first return annotation along the class hierarchy.  ``None``
    kinds mean one value whose kind follows the component's role (environments
    and actors produce batched data, learners global values)."""
    for cls in component_class(component).__mro__:
        func = vars(cls).get(method)
        if func is None:
            continue
        func = getattr(func, "__wrapped__", func)
        if "return" not in getattr(func, "__annotations__", {}):
            continue
        try:
            annotation = typing.get_type_hints(func, localns=_KIND_NAMES).get("return")
        except Exception:
            continue
        kinds = _kinds_from_annotation(annotation)
        if kinds is not None:
            return kinds, typing.get_origin(annotation) is tuple
    return None, False


_KIND_NAMES = {"Batched": Batched, "Global": Global, "NoValue": NoValue}


def _kinds_from_annotation(annotation: Any) -> tuple[ValueKind, ...] | None:
    if annotation is NoValue or annotation is None or annotation is type(None):
        return ()
    if annotation is Batched:
        return (ValueKind.BATCHED,)
    if annotation is Global:
        return (ValueKind.GLOBAL,)
    if typing.get_origin(annotation) is tuple:
        inner = [_kinds_from_annotation(arg) for arg in typing.get_args(annotation)]
        single = [kind[0] for kind in inner if kind is not None and len(kind) == 1]
        if inner and len(single) == len(inner):
            return tuple(single)
    return None


class Proxy:
    """A traced value.  Using it as data raises a TraceError at the user's line."""

    __slots__ = ("_ref", "_tracer")

    def __init__(self, ref: ValueRef, tracer: Tracer) -> None:
        self._ref = ref
        self._tracer = tracer

    def __repr__(self) -> str:
        return f"Proxy({self._ref})"

    def __bool__(self) -> bool:
        raise ControlFlowError(
            f"Python control flow depends on the traced value {self._describe()} (an if/while/and/or/not on it); "
            "move that logic into a component method, or make the condition a constant",
            user_site(),
        )

    def __iter__(self) -> Iterator[Any]:
        raise _unpack_error(self, sys._getframe(1))

    def __len__(self) -> int:
        raise self._refuse(f"len() of {self._describe()} needs real data; compute it inside a component")

    def __getitem__(self, key: Any) -> Proxy:
        return self._tracer.call_function(operator.getitem, (self, key))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # a protocol (numpy's __array_struct__, copy's __deepcopy__): computing with it
            self._unsupported()
        raise self._refuse(
            f"attribute {name!r} of {self._describe()} needs real data; "
            "traced values can only be passed to component methods"
        )

    def _describe(self) -> str:
        node = self._tracer.nodes_by_id[self._ref.node]
        return f"'{node.meta['pretty']}' (output {self._ref.index}, made at {node.site})"

    def _refuse(self, message: str) -> UnsupportedOperationError:
        """``message`` at the user's line; where that line called a function of a library (or of
        msrl) that reached the traced value, such as ``np.clip``, the error names that function."""
        site, callee = user_call()
        if callee is not None:
            message = (
                f"{callee}() computes with the traced value {self._describe()} outside a component; "
                "move that computation into a component method"
            )
        return UnsupportedOperationError(message, site)

    def _unsupported(self, *_: Any) -> Any:
        raise self._refuse(
            f"computation on the traced value {self._describe()} outside a component; move it into a component method"
        )

    __array__ = __float__ = __int__ = __index__ = __complex__ = _unsupported
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _unsupported
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _unsupported
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _unsupported
    __pow__ = __rpow__ = __matmul__ = __rmatmul__ = __neg__ = __pos__ = __abs__ = __invert__ = _unsupported
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _unsupported
    __hash__ = object.__hash__

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        for leaf in iter_leaves((args, kwargs or {})):
            if isinstance(leaf, Proxy):
                leaf._unsupported()
        raise UnsupportedOperationError("torch function called on traced values", user_site())


_KIND_ANNOTATIONS = {ValueKind.BATCHED: "Batched", ValueKind.GLOBAL: "Global"}


def _unpack_error(proxy: Proxy, frame: types.FrameType | None) -> UnsupportedOperationError:
    """The error for unpacking or iterating over ``proxy`` in ``frame``: a component method's result
    is one value unless its return annotation says it is a tuple.  Where that method is the user's
    own, the error points at it and says how to annotate it; otherwise at the user's line."""
    at, _ = user_frame(frame)
    count = _unpacked_into(frame) if frame is at else None
    node = proxy._tracer.nodes_by_id[proxy._ref.node]
    unpacks = f"unpacked into {count} values" if count else "unpacked or iterated over"
    if node.op is not Op.CALL_COMPONENT:
        return UnsupportedOperationError(f"{proxy._describe()} is one value; it cannot be {unpacks}", format_site(at))
    name, method = node.target
    owner, func = _implementation(proxy._tracer.components[name], method)
    label = f"{owner.__name__}.{method}"
    code = getattr(func, "__code__", None)
    if code is None or code_kind(code.co_filename) != "user":
        return UnsupportedOperationError(
            f"cannot unpack or iterate over {proxy._describe()}: {label} returns one value "
            "(its return annotation is not a tuple)",
            format_site(at),
        )
    kind = _KIND_ANNOTATIONS.get(node.output_kinds[0], "Batched")
    annotation = f"tuple[{', '.join([kind] * count)}]" if count else "tuple[...] with one Batched or Global per value"
    return UnsupportedOperationError(
        f"{label} is not annotated to return a tuple, so msrl takes its result for one value, but "
        f"'{node.meta['pretty']}' is {unpacks} at {format_site(at)}; annotate {label} with -> {annotation}",
        format_location(code.co_filename, _def_line(code)),
    )


def _implementation(component: Component, method: str) -> tuple[type, Any]:
    """The class along ``component``'s hierarchy that defines ``method``, and its function (unwrapped)."""
    for cls in component_class(component).__mro__:
        if method in vars(cls):
            return cls, inspect.unwrap(vars(cls)[method])
    return component_class(component), None


def _unpacked_into(frame: types.FrameType | None) -> int | None:
    """How many names ``frame``'s current instruction unpacks a value into (``a, b, c = value``), or
    ``None`` where it does something else (iterates, calls ``list()``, unpacks with a star)."""
    if frame is None:
        return None
    for instruction in dis.get_instructions(frame.f_code):
        if instruction.offset == frame.f_lasti:
            return instruction.arg if instruction.opname == "UNPACK_SEQUENCE" else None
    return None


def _def_line(code: types.CodeType) -> int:
    """The line of the ``def`` of ``code``'s function, below its decorators."""
    lines = linecache.getlines(code.co_filename)
    for line in range(code.co_firstlineno, min(len(lines), code.co_firstlineno + 20) + 1):
        if lines[line - 1].lstrip().startswith(("def ", "async def ")):
            return line
    return code.co_firstlineno


class _ComponentProxy:
    """Stands in for a declared component while tracing; its methods record nodes."""

    def __init__(self, name: str, component: Component, tracer: Tracer) -> None:
        self._name = name
        self._component = component
        self._tracer = tracer

    def __getattr__(self, method: str) -> Any:
        attr = getattr(component_class(self._component), method, None)
        if method.startswith("_") or not callable(attr):
            raise UnsupportedOperationError(
                f"train_step may only call public methods of component '{self._name}' "
                f"({component_class(self._component).__name__}); {method!r} is not one",
                user_site(),
            )

        def record(*args: Any, **kwargs: Any) -> Any:
            return self._tracer.call_component(self._name, self._component, method, args, kwargs)

        return record


class _AlgorithmView:
    """What ``self`` is inside ``train_step`` while tracing: components become
    proxies, helper methods and properties run on the view, other attributes are
    frozen (see ``msrl.core._hidden_state``): Python here runs once, so state kept in them would too."""

    def __init__(self, algorithm: Any, tracer: Tracer) -> None:
        object.__setattr__(self, "_algorithm", algorithm)
        object.__setattr__(self, "_tracer", tracer)

    def __getattr__(self, name: str) -> Any:
        algorithm = object.__getattribute__(self, "_algorithm")
        tracer = object.__getattribute__(self, "_tracer")
        if name in tracer.components:
            return tracer.component_proxies[name]
        class_attr = inspect.getattr_static(type(algorithm), name, None)
        if isinstance(class_attr, types.FunctionType):
            return types.MethodType(class_attr, self)
        if isinstance(class_attr, property) and class_attr.fget is not None:
            return class_attr.fget(self)
        if isinstance(class_attr, (staticmethod, classmethod)):
            return getattr(algorithm, name)  # the algorithm's own code, checked like train_step
        return freeze(getattr(algorithm, name), f"self.{name}", keep=(Proxy, _ComponentProxy))

    def __setattr__(self, name: str, value: Any) -> None:
        raise UnsupportedOperationError(
            f"train_step assigns self.{name}; state must live inside components, not on the algorithm", user_site()
        )


class Tracer:
    """Records one ``train_step`` call.  Use ``msrl.trace`` rather than this class."""

    def __init__(self, components: dict[str, Component]) -> None:
        self.components = components
        self.component_proxies = {name: _ComponentProxy(name, comp, self) for name, comp in components.items()}
        self._declared_ids = {id(comp) for comp in components.values()}
        self.nodes: list[Node] = []
        self.nodes_by_id: dict[str, Node] = {}
        self.loops: list[dict[str, Any]] = []
        self._active_loop: dict[str, Any] | None = None
        self._counter = 0

    # -- the one funnel every recorded node goes through -----------------
    def create_node(
        self,
        op: Op,
        target: Any,
        args: tuple,
        kwargs: dict,
        kinds: tuple[ValueKind, ...],
        pretty: str,
        site: str | None = None,
    ) -> Node:
        """Record one node (``site``: where it was made, the user's line unless given)."""
        self._counter += 1
        node = Node(
            name=f"n{self._counter}",
            op=op,
            target=target,
            args=self.create_arg(args),
            kwargs=self.create_arg(kwargs),
            site=user_site() if site is None else site,
            output_kinds=kinds,
        )
        node.meta["pretty"] = pretty
        if self._active_loop is not None:
            node.meta["loop"] = self._active_loop["id"]
            node.meta["iteration"] = self._active_loop["iteration"]
            self._active_loop["bodies"][self._active_loop["iteration"]].append(node.name)
        self.nodes.append(node)
        self.nodes_by_id[node.name] = node
        return node

    def create_arg(self, value: Any) -> Any:
        """Turn user arguments into graph arguments, rejecting what cannot be represented."""

        def convert(leaf: Any) -> Any:
            if isinstance(leaf, Proxy):
                if leaf._tracer is not self:
                    raise UnsupportedOperationError("a traced value from another trace was passed in", user_site())
                return leaf._ref
            if isinstance(leaf, _CONSTANTS) or isinstance(leaf, (ValueRef, CarryRef)):
                return leaf
            if isinstance(leaf, (_ComponentProxy, Component)):
                raise UnsupportedOperationError(
                    "a component was passed as an argument; "
                    "components talk only through the values their methods return",
                    user_site(),
                )
            raise UnsupportedOperationError(
                f"an argument of type {type(leaf).__name__} was passed to a component call; only values returned by "
                "component methods, constants (int, float, str, bool, None) and tuples/lists/dicts of them can flow "
                "between components",
                user_site(),
            )

        return map_leaves(convert, value)

    # -- what proxies call ----------------------------------------------
    def call_component(self, name: str, component: Component, method: str, args: tuple, kwargs: dict) -> Any:
        kinds, is_tuple = output_kinds(component, method)
        if kinds is None:
            kinds = (ValueKind.GLOBAL if role_of(component) is Role.LEARNER else ValueKind.BATCHED,)
        node = self.create_node(Op.CALL_COMPONENT, (name, method), args, kwargs, kinds, f"{name}.{method}")
        node.meta["tuple"] = is_tuple
        if not kinds:
            return None
        proxies = tuple(Proxy(ValueRef(node.name, i), self) for i in range(len(kinds)))
        return proxies if is_tuple else proxies[0]

    def call_function(self, fn: Any, args: tuple) -> Proxy:
        kind = next(
            (
                self.nodes_by_id[leaf._ref.node].output_kinds[leaf._ref.index]
                for leaf in iter_leaves(args)
                if isinstance(leaf, Proxy)
            ),
            ValueKind.BATCHED,
        )
        node = self.create_node(Op.CALL_FUNCTION, fn, args, {}, (kind,), fn.__name__)
        return Proxy(ValueRef(node.name), self)

    def on_untraced_component_call(self, component: Component, method: str) -> None:
        if id(component) not in self._declared_ids:
            raise UndeclaredComponentError(
                f"{type(component).__name__}.{method}() was called on a component the algorithm does not declare; "
                "assign every component as an attribute in __init__ (self.name = ...) so msrl can place it",
                user_site(),
            )
        raise UnsupportedOperationError(
            f"{type(component).__name__}.{method}() was called directly instead of through train_step's self",
            user_site(),
        )

    # -- loops ------------------------------------------------------------
    def loop(self, n: Any) -> Iterator[int]:
        site = user_site()
        if isinstance(n, Proxy):
            raise ControlFlowError(
                "the bound of msrl.steps() is a traced value; loop bounds must be static integers", site
            )
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise TraceError(f"msrl.steps() needs a positive integer, got {n!r}", site)
        if self._active_loop is not None:
            raise TraceError(
                "nested msrl.steps() loops are not supported; flatten the loop or move the inner one into a component",
                site,
            )
        loop = {
            "id": f"loop{len(self.loops)}",
            "trip_count": n,
            "site": site,
            "iteration": 0,
            "bodies": ([], []),
            "done": False,
        }
        self.loops.append(loop)
        self._active_loop = loop
        try:
            for iteration in (0, 1):
                loop["iteration"] = iteration
                yield iteration
            loop["done"] = True
        finally:
            # Runs when the loop ends, or when the generator is dropped after a
            # break; check_loops_completed reports the latter once train_step returns.
            self._active_loop = None

    def check_loops_completed(self) -> None:
        for loop in self.loops:
            if not loop["done"]:
                raise TraceError(
                    "break or return inside an msrl.steps() loop is not supported; every iteration must run",
                    loop["site"],
                )


_TRACERS: list[Tracer] = []


def steps(n: int) -> Iterator[int]:
    """Loop ``n`` times inside ``train_step``: ``for _ in msrl.steps(n):``.

    While tracing this marks a loop region (so the graph holds the body once,
    not n copies); when ``train_step`` is called directly it is ``range(n)``.
    """
    if _TRACERS:
        return _TRACERS[-1].loop(n)
    return iter(range(n))


def trace(algorithm: Any) -> DataflowGraph:
    """Trace ``algorithm.train_step()`` into a ``DataflowGraph``.

    Example::

        graph = msrl.trace(algorithm)
        print(graph)               # one line per component-method call
        graph.loop_carried()       # e.g. [('env.step', 'actor.act', %env.step[0])]
    """
    components = algorithm.components()
    tracer = Tracer(components)
    view = _AlgorithmView(algorithm, tracer)
    _TRACERS.append(tracer)
    _components._ACTIVE_TRACER.append(tracer)
    try:
        with algorithm_code(type(algorithm)), watching_draws():
            result = type(algorithm).train_step(view)
        tracer.check_loops_completed()
        tracer.create_node(Op.OUTPUT, None, (result,), {}, (), "output", site="train_step return")
    finally:
        _TRACERS.pop()
        _components._ACTIVE_TRACER.pop()
    nodes, regions = fold_loops(tracer.nodes, tracer.loops)
    roles = {name: role_of(component) for name, component in components.items()}
    return DataflowGraph(nodes, regions, roles)
