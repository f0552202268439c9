"""Fragment programs: the part of the graph one fragment replica runs, in order,
with loop regions kept as blocks so executors can run (or capture) a body."""

from __future__ import annotations

from dataclasses import dataclass, field

from msrl._graph import LoopRegion, Node
from fragments._fdg import FragmentedGraph


@dataclass
class LoopBlock:
    """A loop body.  ``carried`` names the body nodes whose outputs the next
    iteration reads; executors snapshot them when an iteration starts, because
    a producer may run again before a later consumer of the old value (``obs``
    is stepped by ``env.step`` before ``buffer.insert`` stores the old one)."""

    region: LoopRegion
    body: list[Node]
    carried: set[str] = field(default_factory=set)


@dataclass
class FragmentProgram:
    fragment: str
    steps: list[Node | LoopBlock]

    def nodes(self) -> list[Node]:
        out: list[Node] = []
        for step in self.steps:
            out.extend(step.body if isinstance(step, LoopBlock) else [step])
        return out


def build_program(fdg: FragmentedGraph, fragment: str) -> FragmentProgram:
    mine = set(fdg.fragments[fragment].nodes)
    steps: list[Node | LoopBlock] = []
    blocks: dict[str, LoopBlock] = {}
    for node in fdg.graph.nodes:
        if node.name not in mine:
            continue
        if node.region is None:
            steps.append(node)
            continue
        if node.region not in blocks:
            blocks[node.region] = LoopBlock(fdg.graph.regions[node.region], [])
            steps.append(blocks[node.region])
        blocks[node.region].body.append(node)
        blocks[node.region].carried.update(ref.node for ref, carried in node.inputs() if carried)
    return FragmentProgram(fragment, steps)
