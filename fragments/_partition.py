"""Partitioning: ``partition(graph, policy) -> FragmentedGraph``, a pure function.

Each node goes with its component's fragment (a ``call_function`` node and the
output go with the producer of their first input).  Each edge between
fragments becomes an interface whose op follows from the replica counts and
the value's kind.
"""

from __future__ import annotations

from fragments._fdg import PER_ITERATION, PER_STEP, Fragment, FragmentedGraph, Interface
from fragments.executors import check_executor
from msrl.core import ConfigError, DataflowGraph, InterfaceOp, Node, Role, ValueKind
from policies import DistributionPolicy


def partition(graph: DataflowGraph, policy: DistributionPolicy) -> FragmentedGraph:
    for spec in policy.fragments:  # executors are fragments' own table: policies only names them
        check_executor(spec.executor, spec.name)
    component_fragment = policy.assign(graph.components)
    fragments = {
        spec.name: Fragment(spec, [c for c, f in component_fragment.items() if f == spec.name])
        for spec in policy.fragments
    }
    empty = [name for name, fragment in fragments.items() if not fragment.components]
    if empty:
        raise ConfigError(f"fragment {empty[0]!r} of policy {policy.name!r} holds no component of this algorithm")
    assignment: dict[str, str] = {}
    for node in graph.nodes:
        assignment[node.name] = _fragment_for(node, component_fragment, assignment, policy)
        fragments[assignment[node.name]].nodes.append(node.name)

    interfaces: dict[tuple, Interface] = {}
    for node in graph.nodes:
        for ref, _ in node.inputs():
            src, dst = assignment[ref.node], assignment[node.name]
            if src == dst:
                continue
            producer = graph.node(ref.node)
            in_loop = producer.region is not None  # a value made before the loop crosses once per iteration
            kind = graph.kind_of(ref)
            op = _interface_op(fragments[src].replicas, fragments[dst].replicas, kind)
            interfaces.setdefault(
                (ref, src, dst), Interface(ref, src, dst, op, PER_STEP if in_loop else PER_ITERATION, kind)
            )
    for fragment in fragments.values():
        if fragment.replicas > 1 and any(graph.components[c] is Role.LEARNER for c in fragment.components):
            interfaces[("grads", fragment.name)] = Interface(
                value=None,
                src=fragment.name,
                dst=fragment.name,
                op=InterfaceOp.ALL_REDUCE,
                frequency=PER_ITERATION,
                kind=ValueKind.GLOBAL,
            )
    fdg = FragmentedGraph(graph, policy, fragments, list(interfaces.values()), assignment)
    fdg.lint()
    if policy.mode == "async":
        _check_runs_ahead(fdg)
    return fdg


def _check_runs_ahead(fdg: FragmentedGraph) -> None:
    """The asynchronous schedule runs every fragment but the one holding the output (the learner's)
    an iteration ahead, taking the weights it broadcasts as they are.  A batched value sent back
    from that fragment (a learner's TD errors, scattered to the replay that sampled them) would be
    awaited by an iteration that runs ahead of the one making it: one line instead of a run that
    stops at its end."""
    output = fdg.assignment[fdg.graph.nodes[-1].name]
    for interface in fdg.interfaces:
        if interface.value is not None and interface.src == output and interface.dst != output:
            if interface.kind is ValueKind.BATCHED:
                raise ConfigError(
                    f"policy {fdg.policy.name!r} is asynchronous: it runs fragment {interface.dst!r} an iteration "
                    f"ahead of {output!r}, but {output!r} sends it {interface.ref} ({interface.kind.value}, "
                    f"{interface.op.value}) every iteration, which needs the synchronous schedule: use a "
                    "synchronous policy such as single_learner_coarse"
                )


def _fragment_for(
    node: Node, component_fragment: dict[str, str], assignment: dict[str, str], policy: DistributionPolicy
) -> str:
    if node.component is not None:
        return component_fragment[node.component]
    inputs = [ref for ref, _ in node.inputs()]
    if inputs:
        return assignment[inputs[0].node]
    return policy.fragments[0].name


def _interface_op(src_replicas: int, dst_replicas: int, kind: ValueKind) -> InterfaceOp:
    if src_replicas == dst_replicas:
        return InterfaceOp.P2P
    if dst_replicas == 1:
        return InterfaceOp.GATHER
    if src_replicas == 1:
        return InterfaceOp.SCATTER if kind is ValueKind.BATCHED else InterfaceOp.BROADCAST
    raise ConfigError(
        f"cannot connect {src_replicas} replicas to {dst_replicas}: replica counts across an interface must be "
        "equal or one side must have a single replica"
    )
