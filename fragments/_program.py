"""Fragment programs: the part of the graph one fragment replica runs, in order,
with loop regions kept as blocks so executors can run (or capture) a body.

A fragment that reads values produced by another fragment gets a ``Recv`` step
at the producer's position in the global node order, and the nodes whose
outputs leave the fragment are listed in ``sends``.  Every replica follows the
same global order and sends never block, so replicas that wait on each other
cannot deadlock: whatever a ``Recv`` waits for comes earlier in that order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fragments._fdg import FragmentedGraph, Interface
from msrl.core import LoopRegion, Node


@dataclass
class Recv:
    """Receive the outputs of ``node``, which another fragment runs."""

    node: Node
    interfaces: list[Interface]

    @property
    def name(self) -> str:
        return self.node.name


@dataclass
class LoopBlock:
    """A loop body.  ``carried`` names the body nodes whose outputs the next
    iteration reads; executors snapshot them when an iteration starts, because
    a producer may run again before a later consumer of the old value (``obs``
    is stepped by ``env.step`` before ``buffer.insert`` stores the old one)."""

    region: LoopRegion
    body: list[Node | Recv]
    carried: set[str] = field(default_factory=set)


@dataclass
class FragmentProgram:
    fragment: str
    steps: list[Node | Recv | LoopBlock]
    sends: dict[str, list[Interface]] = field(default_factory=dict)
    """Node name -> the interfaces its outputs leave this fragment by."""

    def nodes(self) -> list[Node]:
        out: list[Node] = []
        for step in self.steps:
            for item in step.body if isinstance(step, LoopBlock) else [step]:
                if isinstance(item, Node):
                    out.append(item)
        return out

    def recvs(self) -> list[Recv]:
        out: list[Recv] = []
        for step in self.steps:
            out.extend(
                item for item in (step.body if isinstance(step, LoopBlock) else [step]) if isinstance(item, Recv)
            )
        return out


def build_program(fdg: FragmentedGraph, fragment: str) -> FragmentProgram:
    mine = set(fdg.fragments[fragment].nodes)
    incoming: dict[str, list[Interface]] = {}
    sends: dict[str, list[Interface]] = {}
    for interface in fdg.interfaces:
        if interface.value is None:  # allreduce: a collective inside the learner, not a dataflow edge
            continue
        if interface.dst == fragment:
            incoming.setdefault(interface.ref.node, []).append(interface)
        if interface.src == fragment:
            sends.setdefault(interface.ref.node, []).append(interface)
    steps: list[Node | Recv | LoopBlock] = []
    blocks: dict[str, LoopBlock] = {}
    for node in fdg.graph.nodes:
        if node.name in mine:
            step: Node | Recv = node
        elif node.name in incoming:
            step = Recv(node, incoming[node.name])
        else:
            continue
        if node.region is None:
            steps.append(step)
            continue
        if node.region not in blocks:
            blocks[node.region] = LoopBlock(fdg.graph.regions[node.region], [])
            steps.append(blocks[node.region])
        blocks[node.region].body.append(step)
        if isinstance(step, Node):
            blocks[node.region].carried.update(ref.node for ref, carried in node.inputs() if carried)
    return FragmentProgram(fragment, steps, sends)
