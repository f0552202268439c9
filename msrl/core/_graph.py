"""The dataflow graph IR that tracing produces and partitioning consumes.

Modelled on torch.fx: a small closed set of node ops, nodes kept in execution
order (the order ``train_step`` made the calls, which is a valid topological
order), and a networkx view for analysis and drawing.  A ``msrl.steps(n)`` loop
becomes a ``LoopRegion``: its body is stored once, and a value that one
iteration hands to the next (``obs``) is a ``CarryRef`` in the body's arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from msrl.core._vocab import Op, Role, ValueKind

if TYPE_CHECKING:  # imported when a graph is built: ``import msrl`` stays light
    import networkx as nx


@dataclass(frozen=True)
class ValueRef:
    """Output ``index`` of node ``node``."""

    node: str
    index: int = 0

    def __str__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}[{self.index}]"


@dataclass(frozen=True)
class CarryRef:
    """A loop-carried value: ``init`` on the first iteration, afterwards the value
    ``update`` took in the previous iteration.  ``init`` may be a constant."""

    init: Any
    update: ValueRef

    def __str__(self) -> str:
        return f"carry({_fmt(self.init)} -> {self.update})"


@dataclass
class Node:
    """One recorded call.  ``target`` is ``(component, method)`` for
    ``call_component`` and a callable for ``call_function``.  ``op`` and
    ``output_kinds`` (one kind per output) may be given as their strings; an
    unknown one raises here, naming the valid choices."""

    name: str
    op: Op
    target: Any
    args: tuple
    kwargs: dict
    site: str
    region: str | None = None
    output_kinds: tuple[ValueKind, ...] = ()
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.op = Op.parse(self.op)
        self.output_kinds = tuple(ValueKind.parse(kind) for kind in self.output_kinds)
        if self.op is Op.CALL_COMPONENT and not (
            isinstance(self.target, tuple) and len(self.target) == 2 and all(isinstance(t, str) for t in self.target)
        ):
            raise ValueError(f"call_component target must be (component, method), got {self.target!r}")
        if self.op is Op.CALL_FUNCTION and not callable(self.target):
            raise ValueError(f"call_function target must be callable, got {self.target!r}")

    @property
    def component(self) -> str | None:
        return self.target[0] if self.op is Op.CALL_COMPONENT else None

    @property
    def method(self) -> str | None:
        return self.target[1] if self.op is Op.CALL_COMPONENT else None

    def inputs(self) -> Iterator[tuple[ValueRef, bool]]:
        """Every value this node reads, with ``True`` for loop-carried ones."""
        for leaf in iter_leaves((self.args, self.kwargs)):
            if isinstance(leaf, ValueRef):
                yield leaf, False
            elif isinstance(leaf, CarryRef):
                if isinstance(leaf.init, ValueRef):
                    yield leaf.init, False
                yield leaf.update, True

    def __str__(self) -> str:
        target = ".".join(self.target) if self.op is Op.CALL_COMPONENT else getattr(self.target, "__name__", "?")
        args = ", ".join([_fmt(a) for a in self.args] + [f"{k}={_fmt(v)}" for k, v in self.kwargs.items()])
        region = f"  [loop {self.region}]" if self.region else ""
        return f"%{self.name} = {self.op}[{target}]({args}){region}  # {self.site}"


@dataclass
class LoopRegion:
    """The body of one ``msrl.steps(trip_count)`` loop."""

    name: str
    trip_count: int
    nodes: list[str]
    site: str


def iter_leaves(tree: Any) -> Iterator[Any]:
    """Leaves of a nest of tuples, lists and dicts (the only containers traced values may sit in)."""
    if isinstance(tree, (tuple, list)):
        for item in tree:
            yield from iter_leaves(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from iter_leaves(item)
    else:
        yield tree


def map_leaves(fn, tree: Any) -> Any:
    if isinstance(tree, tuple):
        return tuple(map_leaves(fn, item) for item in tree)
    if isinstance(tree, list):
        return [map_leaves(fn, item) for item in tree]
    if isinstance(tree, dict):
        return {key: map_leaves(fn, item) for key, item in tree.items()}
    return fn(tree)


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_fmt(v)}" for k, v in value.items()) + "}"
    return str(value) if isinstance(value, (ValueRef, CarryRef)) else repr(value)


class GraphLintError(Exception):
    """The graph breaks an invariant; this is an msrl bug, not a user error."""


class DataflowGraph:
    """What ``msrl.trace`` returns.

    ``nodes`` is the execution order; ``nx`` is a ``networkx.MultiDiGraph`` with
    one edge per value passed (``kind="data"``, ``value``, ``carried``) and
    ordering edges between successive calls on one component (``kind="order"``:
    a component call has side effects, so ``buffer.insert`` must never be
    dropped or reordered).  ``components`` maps each component to its role.
    """

    def __init__(self, nodes: list[Node], regions: dict[str, LoopRegion], components: dict[str, Role]) -> None:
        self.nodes = nodes
        self.regions = regions
        self.components = {name: Role.parse(role) for name, role in components.items()}
        self._by_name = {node.name: node for node in nodes}
        self.nx = self._build_nx()
        self.lint()

    def node(self, name: str) -> Node:
        return self._by_name[name]

    @property
    def output(self) -> Node:
        return self.nodes[-1]

    def kind_of(self, ref: ValueRef) -> ValueKind:
        return self._by_name[ref.node].output_kinds[ref.index]

    def loop_carried(self) -> list[tuple[str, str, ValueRef]]:
        """``(producer, consumer, value)`` for every value carried between loop iterations."""
        return [(u, v, d["value"]) for u, v, d in self.nx.edges(data=True) if d.get("carried")]

    def calls(self, component: str) -> list[Node]:
        return [node for node in self.nodes if node.component == component]

    def _build_nx(self) -> nx.MultiDiGraph:
        import networkx as nx

        graph = nx.MultiDiGraph()
        last_call: dict[str, str] = {}
        for node in self.nodes:
            graph.add_node(node.name, op=node.op, target=node.target, region=node.region, site=node.site)
            for ref, carried in node.inputs():
                graph.add_edge(ref.node, node.name, key=str(ref), kind="data", value=ref, carried=carried)
            if node.component is not None:
                if node.component in last_call:
                    graph.add_edge(last_call[node.component], node.name, key="order", kind="order", carried=False)
                last_call[node.component] = node.name
        return graph

    def lint(self) -> None:
        """Check the invariants every pass relies on."""
        seen: set[str] = set()
        for position, node in enumerate(self.nodes):
            if node.name in seen:
                raise GraphLintError(f"duplicate node name {node.name!r}")
            if node.op is Op.OUTPUT and position != len(self.nodes) - 1:
                raise GraphLintError("the output node must be last")
            for ref, carried in node.inputs():
                producer = self._by_name.get(ref.node)
                if producer is None:
                    raise GraphLintError(f"{node.name} reads {ref} which no node produces")
                if ref.index >= len(producer.output_kinds):
                    raise GraphLintError(
                        f"{node.name} reads {ref} but {producer.name} has {len(producer.output_kinds)} outputs"
                    )
                if carried:
                    if producer.region is None or producer.region != node.region:
                        raise GraphLintError(f"{node.name} carries {ref} from outside its loop")
                elif ref.node not in seen:
                    raise GraphLintError(f"{node.name} reads {ref} before it is produced")
            seen.add(node.name)
        if not self.nodes or self.nodes[-1].op is not Op.OUTPUT:
            raise GraphLintError("the graph has no output node")
        for region in self.regions.values():
            positions = [self.nodes.index(self._by_name[name]) for name in region.nodes]
            if positions != list(range(positions[0], positions[0] + len(positions))):
                raise GraphLintError(f"loop region {region.name} is not contiguous")

    def __str__(self) -> str:
        lines = [
            f"DataflowGraph ({len(self.nodes)} nodes, "
            f"components: {', '.join(f'{c}:{r}' for c, r in self.components.items())})"
        ]
        for region in self.regions.values():
            lines.append(
                f"  loop {region.name}: {region.trip_count} iterations of {', '.join(region.nodes)}  # {region.site}"
            )
        lines.extend(f"  {node}" for node in self.nodes)
        return "\n".join(lines)
