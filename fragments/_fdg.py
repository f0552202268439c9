"""The fragmented dataflow graph (FDG): fragments plus the interfaces on the
edges the distribution policy cut."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from msrl.core import DataflowGraph, GraphLintError, InterfaceOp, ValueKind, ValueRef
from policies import DistributionPolicy, FragmentSpec

PER_STEP = "per_step"
PER_ITERATION = "per_iteration"


@dataclass
class Fragment:
    """A group of components that always run together, and the nodes they run."""

    spec: FragmentSpec
    components: list[str]
    nodes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def replicas(self) -> int:
        return self.spec.replicas


class ReplicaId(NamedTuple):
    """One replica of a fragment: the fragment's name and the replica's index in it (0 to its
    replica count - 1).  A runtime keys what it holds per replica by it (the worker, its queued
    iterations, where it runs), and messages name the replica as ``learner[0]``."""

    fragment: str
    replica: int

    def __str__(self) -> str:
        return f"{self.fragment}[{self.replica}]"


@dataclass(frozen=True)
class Interface:
    """A value crossing from fragment ``src`` to ``dst``.

    ``op`` follows from replica counts and the value's kind: ``gather``
    (N->1 batched), ``scatter`` (1->N batched), ``broadcast`` (1->N global),
    ``p2p`` (equal counts) or ``allreduce`` (gradients across learner replicas,
    whose ``value`` is ``None``).  ``op`` and ``kind`` may be given as their
    strings; an unknown one raises here.
    """

    value: ValueRef | None
    src: str
    dst: str
    op: InterfaceOp
    frequency: str
    kind: ValueKind

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", InterfaceOp.parse(self.op))
        object.__setattr__(self, "kind", ValueKind.parse(self.kind))
        if (self.value is None) != (self.op is InterfaceOp.ALL_REDUCE):
            raise ValueError(f"interface {self.src} -> {self.dst}: only an allreduce carries no value")

    @property
    def ref(self) -> ValueRef:
        """The value a dataflow interface carries (every op but ``allreduce``)."""
        if self.value is None:
            raise ValueError(f"the {self.op} interface of {self.src} carries no dataflow value")
        return self.value

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst}: {self.value} [{self.op}, {self.kind}, {self.frequency}]"


@dataclass
class FragmentedGraph:
    graph: DataflowGraph
    policy: DistributionPolicy
    fragments: dict[str, Fragment]
    interfaces: list[Interface]
    assignment: dict[str, str]  # node -> fragment

    def fragment_of(self, node: str) -> Fragment:
        return self.fragments[self.assignment[node]]

    def lint(self) -> None:
        """Every node in exactly one fragment; every value crossing fragments declared."""
        self.graph.lint()
        placed = [n for fragment in self.fragments.values() for n in fragment.nodes]
        if sorted(placed) != sorted(node.name for node in self.graph.nodes):
            raise GraphLintError("fragments do not cover every node exactly once")
        declared = {(i.value, i.src, i.dst) for i in self.interfaces if i.op is not InterfaceOp.ALL_REDUCE}
        for node in self.graph.nodes:
            for ref, _ in node.inputs():
                src, dst = self.assignment[ref.node], self.assignment[node.name]
                if src != dst and (ref, src, dst) not in declared:
                    raise GraphLintError(f"{ref} crosses {src} -> {dst} without an interface")

    def __str__(self) -> str:
        lines = [f"FDG for policy {self.policy.name!r} (placement {self.policy.placement}, {self.policy.mode})"]
        for fragment in self.fragments.values():
            spec = fragment.spec
            resources = ", ".join(f"{k}={v:g}" for k, v in spec.resources.items())
            lines.append(
                f"  fragment {fragment.name}: {spec.replicas} x [{', '.join(fragment.components)}] "
                f"executor={spec.executor} resources({resources})"
            )
            lines.extend(f"    {name}" for name in fragment.nodes)
        lines.append(f"  interfaces ({len(self.interfaces)}):")
        lines.extend(f"    {interface}" for interface in self.interfaces)
        return "\n".join(lines)
