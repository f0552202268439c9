"""The cost of a fragmented graph: what one iteration of any algorithm, cut by any distribution
policy, computes and sends, and how long that takes on a cluster of given hosts and links.

Everything here is derived from the graph and one measurement of the unsplit run:

* a ``Calibration``, one iteration of the ``local`` policy measured node by node (seconds of every
  component call, bytes of every value it returned, the learner's gradient all-reduces);
* the ``FragmentedGraph`` of the policy: which fragment runs each node with how many replicas, and
  the interface each cut value crosses (gather, scatter, broadcast, p2p, allreduce), once an
  iteration or once a step;
* a ``ClusterShape`` (hosts, cores and GPUs per host, the link between hosts) and ``CostConstants``
  (software time per message, per ring step of an all-reduce, per driver round).

``predict`` places the replicas on the hosts as the policy's placement strategy would, then walks
the programs of the fragments in the graph's global order, one representative replica each (the
replicas of a fragment are alike), for a few iterations: a node starts when its fragment is free
and every value it reads has arrived, a replica's share of a node's work is the calibration's
divided by the fragment's replicas, stretched where a host's busy replicas outnumber its cores, and
a value crossing between fragments costs its messages at the busier end, the link's delay and its
bytes at the link's rate.  Sync policies wait for every fragment between iterations (the driver's
round); async ones let the fragments that do not hold the output run an iteration ahead, taking the
output fragment's global values (weights) as they are.  Pure arithmetic, no Ray, no torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from fragments._fdg import FragmentedGraph, Interface
from msrl.core import ConfigError, InterfaceOp, LoopRegion, Node, Op, ValueKind

ASYNC_AHEAD = 1
"""How many iterations an async policy's rollout fragments run ahead of the output fragment."""
_ITERATIONS = 6
"""Iterations simulated; the steady state is read from the last ones."""
_SHARING_ROUNDS = 4
"""Async policies: the walk again with each fragment's share of the cores from the last (a fixed
point of processor sharing; four rounds settle it to well under a percent in the runs measured)."""


@dataclass(frozen=True)
class Calibration:
    """One iteration of the unsplit (``local``) run, measured node by node.

    ``node_seconds``: seconds per iteration of every component call node (all its calls in the
    iteration together); ``output_bytes``: the bytes of each output of one call of every node;
    ``env_steps``: env steps an iteration; ``iteration_s``: the measured iteration;
    ``allreduces``: gradient (and statistics) all-reduces a learner makes per iteration, and
    ``allreduce_bytes`` their bytes together; ``threads``: torch threads the calibration ran on."""

    node_seconds: dict[str, float]
    output_bytes: dict[str, list[int]]
    env_steps: int
    iteration_s: float
    allreduces: int = 0
    allreduce_bytes: int = 0
    threads: int = 1
    half_node_seconds: dict[str, float] = field(default_factory=dict)
    """The same nodes with half of every per-run quantity (what one of two replicas builds);
    empty where they do not halve."""

    def share_seconds(self, node: str, replicas: int) -> float:
        """A node's seconds per iteration on one of ``replicas`` replicas: a part that does not
        shrink with the share (``2 x half - whole``, from the two measurements) plus the rest
        divided among the replicas; without a half measurement, all of it divided."""
        whole = self.node_seconds.get(node, 0.0)
        if replicas == 1:
            return whole
        half = self.half_node_seconds.get(node)
        fixed = 0.0 if half is None else min(max(2 * half - whole, 0.0), whole)
        return fixed + (whole - fixed) / replicas

    @property
    def other_s(self) -> float:
        """What the iteration took beyond its component calls: the interpreter's own work, and
        diagnostics computed after the weights were sent (``msrl.deferred``)."""
        return max(0.0, self.iteration_s - sum(self.node_seconds.values()))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> Calibration:
        """A calibration from its JSON data (``asdict``), every field checked: ``ValueError`` names
        the first that is missing, unknown or not a finite, non-negative number where one belongs."""
        if not isinstance(data, dict):
            raise ValueError(f"a calibration is a mapping, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown calibration field {unknown[0]!r}")
        for key in ("node_seconds", "half_node_seconds"):
            table = data.get(key, {})
            if not isinstance(table, dict) or not all(_number(v) for v in table.values()):
                raise ValueError(f"{key} must map node names to seconds")
        sizes = data.get("output_bytes", {})
        if not isinstance(sizes, dict) or not all(
            isinstance(v, list) and all(_number(b) for b in v) for v in sizes.values()
        ):
            raise ValueError("output_bytes must map node names to lists of byte counts")
        for key in ("env_steps", "iteration_s", "allreduces", "allreduce_bytes", "threads"):
            if key in data and not _number(data[key]):
                raise ValueError(f"{key} must be a finite number >= 0, got {data[key]!r}")
        missing = [key for key in ("node_seconds", "output_bytes", "env_steps", "iteration_s") if key not in data]
        if missing:
            raise ValueError(f"the calibration has no {missing[0]!r}")
        if data["env_steps"] <= 0 or data["iteration_s"] <= 0:
            raise ValueError("a calibration's iteration takes env steps and time")
        return cls(**data)


@dataclass(frozen=True)
class Link:
    """The link between two hosts: ``rate_bits`` per second each way and ``delay_s`` one way."""

    rate_bits: float = math.inf
    delay_s: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> Link:
        """``1gbit/0.5ms``, ``100mbit/2ms``, ``10gbit``, ``none``: a tc rate and a one-way delay."""
        text = spec.strip().lower()
        if text in ("", "none"):
            return cls()
        found = re.fullmatch(r"(?:(\d+(?:\.\d+)?)(kbit|mbit|gbit))?(?:/?(\d+(?:\.\d+)?)(us|ms|s))?", text)
        if not found or not (found[1] or found[3]):
            raise ConfigError(
                f"unknown link {spec!r}; valid forms: RATE/DELAY such as 1gbit/0.5ms or 100mbit/2ms, a rate "
                "alone (10gbit), a delay alone (2ms), or none"
            )
        rate = float(found[1]) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[found[2]] if found[1] else math.inf
        delay = float(found[3]) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[found[4]] if found[3] else 0.0
        if rate <= 0:
            raise ConfigError(f"link {spec!r}: the rate must be positive")
        return cls(rate, delay)

    def __str__(self) -> str:
        if self.rate_bits == math.inf and self.delay_s == 0:
            return "no link cost"
        rate = "any rate" if self.rate_bits == math.inf else f"{self.rate_bits / 1e6:g} Mbit/s"
        return f"{rate}, {self.delay_s * 1e3:g} ms"


@dataclass(frozen=True)
class ClusterShape:
    """The hosts a run may use: ``hosts`` alike, each with ``cores`` (what its replicas' threads
    share) and ``gpus``; ``cpus`` is what each offers Ray (None: its cores; more than the cores where
    a local Ray is started for the policy's demand, as msrl's embedded one is)."""

    hosts: int = 1
    cores: float = 1.0
    gpus: float = 0.0
    link: Link = field(default_factory=Link)
    cpus: float | None = None
    shared_cores: float | None = None
    """Hosts that are namespaces or VMs of one machine share its cores: this many in all (None:
    every host has its own)."""

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.cores <= 0 or self.gpus < 0:
            raise ConfigError(f"a cluster needs at least one host with cores, got {self}")

    @property
    def offered_cpus(self) -> float:
        return self.cores if self.cpus is None else self.cpus


@dataclass(frozen=True)
class CostConstants:
    """Software time of the transports, seconds: a message between hosts (a Ray actor call at the
    end that handles it), a message between two processes of one host (msrl's socket path), a step
    of a ring all-reduce between hosts and on one host, and the driver's round of an iteration
    (its call of the replicas and their replies) on a Ray policy.  ``header_bytes``: framing per
    message.

    The same-host constants, ``driver_s``, ``ray_cores`` and ``record_s`` are fitted on the 2-core
    VM's runs of five workloads under every preset (``python -m benchmarks.plan_accuracy --report
    --fit``: docs/scaling.md, "Constants"); the between-hosts ones are docs/scaling.md's PPO
    CartPole fit on the testbed (a quiet machine's Ray actor call) and its assumed gloo step."""

    message_s: float = 1.8e-3
    local_message_s: float = 0.9e-3
    ring_step_s: float = 0.1e-3
    local_ring_step_s: float = 1e-3
    driver_s: float = 7e-3
    header_bytes: float = 1400.0
    ray_cores: float = 0.4
    """Cores a host that runs Ray replicas gives to Ray's own processes and the driver's polling."""
    ring_step_delays: float = 3.0
    """One-way delays a ring all-reduce step pays between hosts: gloo's step sends only once the
    peer has said its buffer is free, so the data and the notice cross the link in turn (fitted on
    the testbed's delayed multi_learner runs: docs/scaling.md, "Constants")."""
    record_s: float = 0.0
    """The run loop's own work an iteration, under every policy (its record, a share of checkpoints)."""


@dataclass
class Prediction:
    """One policy's predicted iteration on a cluster.  ``compute_s`` and ``communication_s`` split
    the critical path; ``communication`` splits its communication into messages' software time,
    the link's delay and the wire (bytes at the rate); ``fragment_busy`` is each fragment's
    compute per iteration (one replica).  ``feasible`` is False with ``reason`` where the cluster
    cannot host the policy."""

    policy: str
    iteration_s: float = math.inf
    compute_s: float = 0.0
    communication_s: float = 0.0
    communication: dict[str, float] = field(default_factory=dict)
    env_steps_per_s: float = 0.0
    fragment_busy: dict[str, float] = field(default_factory=dict)
    placement: dict[str, int] = field(default_factory=dict)
    cpus: float = 0.0
    gpus: float = 0.0
    feasible: bool = True
    reason: str = ""
    traffic: dict[str, float] = field(default_factory=dict)

    @property
    def dominant(self) -> str:
        """What the iteration spends most on: a fragment's compute or a kind of communication."""
        parts = {f"{name}'s compute": seconds for name, seconds in self.fragment_busy.items()}
        names = {"messages": "messages' software time", "delay": "the link's delay", "wire": "the wire (bytes)"}
        parts.update({names[key]: seconds for key, seconds in self.communication.items()})
        return max(parts, key=lambda key: parts[key]) if parts else "nothing"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


# -- placement -----------------------------------------------------------------------------------------
def place(fdg: FragmentedGraph, shape: ClusterShape) -> dict[str, int] | str:
    """Replica (``name[i]``) -> host, as the policy's placement strategy puts Ray's bundles on alike
    hosts; or the reason it cannot (a bundle that fits no host, a GPU the cluster lacks)."""
    bundles = [
        (f"{fragment.name}[{i}]", fragment.spec.resources.get("CPU", 0.0), fragment.spec.resources.get("GPU", 0.0))
        for fragment in fdg.fragments.values()
        for i in range(fragment.replicas)
    ]
    cpus = sum(b[1] for b in bundles)
    gpus = sum(b[2] for b in bundles)
    if fdg.policy.in_process:
        return {name: 0 for name, _, _ in bundles}
    offered = shape.offered_cpus
    if gpus and not shape.gpus:
        return f"needs {gpus:g} GPU(s); the cluster has none"
    free_cpu = [offered] * shape.hosts
    free_gpu = [shape.gpus] * shape.hosts
    spread = fdg.policy.placement in ("SPREAD", "STRICT_SPREAD")
    where: dict[str, int] = {}
    for index, (name, cpu, gpu) in enumerate(bundles):
        order = [(index + k) % shape.hosts for k in range(shape.hosts)] if spread else list(range(shape.hosts))
        host = next((h for h in order if free_cpu[h] >= cpu - 1e-9 and free_gpu[h] >= gpu - 1e-9), None)
        if host is None:
            return (
                f"needs {cpus:g} CPUs{f' and {gpus:g} GPUs' if gpus else ''} in bundles of up to "
                f"{max(b[1] for b in bundles):g}; the cluster offers {shape.hosts} x {offered:g} CPUs"
                f"{f' and {shape.gpus:g} GPUs' if shape.gpus else ''}"
            )
        where[name] = host
        free_cpu[host] -= cpu
        free_gpu[host] -= gpu
    if fdg.policy.placement == "STRICT_PACK" and len(set(where.values())) > 1:
        return f"STRICT_PACK needs {cpus:g} CPUs on one host; a host offers {offered:g}"
    if fdg.policy.placement == "STRICT_SPREAD" and len(set(where.values())) < len(where):
        return f"STRICT_SPREAD needs {len(where)} hosts; the cluster has {shape.hosts}"
    return where


# -- the walk ---------------------------------------------------------------------------------------------
@dataclass
class _Clock:
    """Where a fragment's representative replica stands: its time, and how that time splits on the
    critical path that led to it."""

    t: float = 0.0
    compute: float = 0.0
    messages: float = 0.0
    delay: float = 0.0
    wire: float = 0.0

    def advance(self, part: str, seconds: float) -> None:
        self.t += seconds
        setattr(self, part, getattr(self, part) + seconds)

    def copy(self) -> _Clock:
        return _Clock(self.t, self.compute, self.messages, self.delay, self.wire)


def _calls(node: Node, regions: dict[str, LoopRegion]) -> int:
    return regions[node.region].trip_count if node.region is not None else 1


class _Walk:
    """The iterations of one policy, walked node by node in the graph's global order."""

    def __init__(
        self,
        fdg: FragmentedGraph,
        cal: Calibration,
        shape: ClusterShape,
        k: CostConstants,
        where: dict[str, int],
        utilization: dict[str, float] | None = None,
    ) -> None:
        self.fdg, self.cal, self.shape, self.k, self.where = fdg, cal, shape, k, where
        self.utilization = utilization or {}
        self.asynchronous = fdg.policy.mode == "async"
        self.output = next(
            (fdg.assignment[n.name] for n in fdg.graph.nodes if n.op is Op.OUTPUT), next(iter(fdg.fragments))
        )
        self.outgoing: dict[str, dict[str, list[Interface]]] = {}
        """Node -> destination fragment -> the interfaces its outputs cross there by: one message
        a destination replica, as the transport sends them."""
        for interface in fdg.interfaces:
            if interface.value is not None:
                by_dst = self.outgoing.setdefault(interface.ref.node, {})
                by_dst.setdefault(interface.dst, []).append(interface)
        self.stretch = {name: self._stretch(name) for name in fdg.fragments}
        self.bytes_by_host = [0.0] * shape.hosts
        self.messages_by_fragment: dict[str, float] = {}
        self.trips = 0
        rings = {i.src for i in fdg.interfaces if i.op is InterfaceOp.ALL_REDUCE}
        learns = [n for n in fdg.graph.nodes if n.op is Op.CALL_COMPONENT and n.target[1] == "learn"]
        calls = sum(_calls(n, fdg.graph.regions) for n in learns if fdg.assignment[n.name] in rings)
        self.ring_s = {
            name: {part: seconds / max(1, calls) for part, seconds in self._allreduce(name).items()} for name in rings
        }
        """A learner fragment's all-reduces per call of its ``learn``: software, delay and wire seconds."""

    def _hosts(self, fragment: str) -> list[int]:
        return [self.where[f"{fragment}[{i}]"] for i in range(self.fdg.fragments[fragment].replicas)]

    def _stretch(self, fragment: str) -> float:
        """How much slower a replica computes than alone: its host's busy threads over its cores.
        Sync: the fragment's own replicas, which run at once.  Async: every replica there, each
        other fragment's for the share of the iteration it computes (``utilization``)."""
        host = self.where[f"{fragment}[0]"]
        shared = self.shape.shared_cores is not None
        busy = 0.0
        for name, other in self.fdg.fragments.items():
            if name == fragment or self.asynchronous:
                share = 1.0 if name == fragment else self.utilization.get(name, 1.0)
                threads = max(1.0, other.spec.resources.get("CPU", 1.0))
                busy += threads * share * sum(1 for h in self._hosts(name) if shared or h == host)
        cores = self.shape.shared_cores if self.shape.shared_cores is not None else self.shape.cores
        if not self.fdg.policy.in_process:
            cores = max(cores - self.k.ray_cores, 0.25)
        return max(1.0, busy / cores)

    def _allreduce(self, fragment: str) -> dict[str, float]:
        """An iteration's all-reduces of one learner replica: rings of 2(R-1) steps, each paying its
        software time, the delay where the ring crosses hosts, and its share of the bytes (sent and
        received at once)."""
        replicas = self.fdg.fragments[fragment].replicas
        hosts = set(self._hosts(fragment))
        steps = 2 * (replicas - 1) * self.cal.allreduces
        if len(hosts) == 1:
            return {"messages": steps * self.k.local_ring_step_s}
        sent = 2 * (replicas - 1) / replicas * self.cal.allreduce_bytes
        for host in hosts:
            self.bytes_by_host[host] += 2 * sent
        self.trips += steps
        return {
            "messages": steps * self.k.ring_step_s,
            "delay": steps * self.k.ring_step_delays * self.shape.link.delay_s,
            "wire": sent * 8 / self.shape.link.rate_bits,
        }

    def compute(self, node: Node) -> float:
        """One call of ``node`` on one replica of its fragment."""
        fragment = self.fdg.assignment[node.name]
        seconds = self.cal.share_seconds(node.name, self.fdg.fragments[fragment].replicas)
        seconds = seconds / _calls(node, self.fdg.graph.regions) * self.stretch[fragment]
        return seconds

    def ring(self, node: Node, clock: _Clock) -> None:
        """After a ``learn`` of a learner fragment with copies: its share of the all-reduces."""
        fragment = self.fdg.assignment[node.name]
        if fragment in self.ring_s and node.op is Op.CALL_COMPONENT and node.target[1] == "learn":
            for part, seconds in self.ring_s[fragment].items():
                clock.advance(part, seconds)

    def _value_bytes(self, interface: Interface) -> float:
        sizes = self.cal.output_bytes.get(interface.ref.node, [])
        return float(sizes[interface.ref.index]) if interface.ref.index < len(sizes) else 0.0

    def crossing(self, interfaces: list[Interface], sent: _Clock, counting: bool) -> _Clock:
        """When a node's outputs sent at ``sent`` to one fragment have reached it: one message a
        destination replica (the transport's), the busier end's messages one after another (the
        one side of a gather, scatter or broadcast handles one per replica of the other), the
        link's delay where a message leaves its host, and the bytes that leave the busier end's
        host at the link's rate."""
        first = interfaces[0]
        src, dst = self.fdg.fragments[first.src], self.fdg.fragments[first.dst]
        src_hosts, dst_hosts = self._hosts(src.name), self._hosts(dst.name)
        if first.op is InterfaceOp.P2P:  # replica i to replica i: one message each, in parallel
            far = int(any(s != d for s, d in zip(src_hosts, dst_hosts, strict=True)))
            messages, hub, busy = 1, dst_hosts[0], dst.name
            each = sum(self._value_bytes(i) for i in interfaces) / src.replicas
        else:
            one, many = (dst, src) if src.replicas > dst.replicas else (src, dst)
            hub = self._hosts(one.name)[0]
            far = sum(1 for h in self._hosts(many.name) if h != hub)
            messages, busy = many.replicas, one.name
            each = sum(
                self._value_bytes(i) / (1 if i.op is InterfaceOp.BROADCAST else many.replicas) for i in interfaces
            )
        near = messages - far
        wire_bytes = far * (each + self.k.header_bytes)
        out = sent.copy()
        out.advance("messages", far * self.k.message_s + near * self.k.local_message_s)
        if far:
            out.advance("delay", self.shape.link.delay_s)
            out.advance("wire", wire_bytes * 8 / self.shape.link.rate_bits)
        if counting:
            self.bytes_by_host[hub] += wire_bytes
            self.messages_by_fragment[busy] = self.messages_by_fragment.get(busy, 0.0) + messages
            self.trips += 1 if far else 0
        return out

    def iterations(self) -> list[_Clock]:
        """The output fragment's clock at the end of each simulated iteration.  A fragment that
        receives a value waits for it where its program receives it: at the producer's place in
        the global order (``fragments.build_program``)."""
        names = list(self.fdg.fragments)
        clocks = {name: _Clock() for name in names}
        ends: list[_Clock] = []
        driver = 0.0 if self.fdg.policy.in_process else self.k.driver_s
        # the driver runs on the first host; its round is a call and a reply to every replica it drives
        driver_trip = 2 * self.shape.link.delay_s
        output_far = any(h != 0 for h in self._hosts(self.output))
        any_far = any(h != 0 for h in self.where.values())
        for iteration in range(_ITERATIONS):
            counting = iteration == _ITERATIONS - 1
            if self.asynchronous:  # the others run ahead, at most ASYNC_AHEAD iterations
                for name in names:
                    gate = self._gate(ends, iteration, name)
                    if name != self.output and gate is not None and gate.t > clocks[name].t:
                        clocks[name] = gate
                clocks[self.output].advance("messages", driver)
                if output_far and not self.fdg.policy.in_process:
                    clocks[self.output].advance("delay", driver_trip)
            else:  # every fragment starts the iteration together, after the driver's round
                start = max(clocks.values(), key=lambda c: c.t).copy()
                start.advance("messages", driver)
                if any_far and not self.fdg.policy.in_process:
                    start.advance("delay", driver_trip)
                clocks = {name: start.copy() for name in names}
            for node in self._order():
                fragment = self.fdg.assignment[node.name]
                clocks[fragment].advance("compute", self.compute(node))
                self.ring(node, clocks[fragment])
                for dst, interfaces in self.outgoing.get(node.name, {}).items():
                    if self.asynchronous and dst != self.output and interfaces[0].kind is ValueKind.GLOBAL:
                        continue  # taken as it is (stale), not waited for
                    arrived = self.crossing(interfaces, clocks[fragment], counting)
                    if arrived.t > clocks[dst].t:
                        clocks[dst] = arrived
            clocks[self.output].advance("compute", self.cal.other_s + self.k.record_s)
            ends.append(clocks[self.output].copy())
        return ends

    def _gate(self, ends: list[_Clock], iteration: int, fragment: str) -> _Clock | None:
        """When an async fragment may start ``iteration``: once the output fragment's global values
        (weights) of ``ASYNC_AHEAD`` iterations before have reached it; None while it may not lag."""
        if iteration - 1 - ASYNC_AHEAD < 0:
            return None
        gate = ends[iteration - 1 - ASYNC_AHEAD]
        latest = gate
        for source, by_dst in self.outgoing.items():
            interfaces = by_dst.get(fragment, [])
            if interfaces and self.fdg.assignment[source] == self.output and interfaces[0].kind is ValueKind.GLOBAL:
                arrived = self.crossing(interfaces, gate, counting=False)
                latest = arrived if arrived.t > latest.t else latest
        return latest.copy()

    def _order(self) -> Iterator[Node]:
        """The graph's nodes in their global order, each loop body repeated its trip count."""
        pending: list[Node] = []
        region: str | None = None
        for node in self.fdg.graph.nodes:
            if node.region != region and pending:
                yield from self._repeat(pending, region)
                pending = []
            region = node.region
            pending.append(node)
        if pending:
            yield from self._repeat(pending, region)

    def _repeat(self, nodes: list[Node], region: str | None) -> Iterator[Node]:
        for _ in range(self.fdg.graph.regions[region].trip_count if region is not None else 1):
            yield from nodes


def predict(fdg: FragmentedGraph, cal: Calibration, shape: ClusterShape, constants: CostConstants) -> Prediction:
    """The policy's iteration on ``shape``, from the unsplit run's ``cal``."""
    name = fdg.policy.name
    cpus = sum(f.spec.resources.get("CPU", 0.0) * f.replicas for f in fdg.fragments.values())
    gpus = sum(f.spec.resources.get("GPU", 0.0) * f.replicas for f in fdg.fragments.values())
    where = place(fdg, shape)
    if isinstance(where, str):
        return Prediction(name, cpus=cpus, gpus=gpus, feasible=False, reason=where)
    utilization: dict[str, float] = {}
    for _ in range(_SHARING_ROUNDS if fdg.policy.mode == "async" else 1):
        walk = _Walk(fdg, cal, shape, constants, where, utilization)
        ends = walk.iterations()
        first, last = ends[-3], ends[-1]
        seconds = (last.t - first.t) / 2
        busy: dict[str, float] = {}
        for node in fdg.graph.nodes:
            if node.op is Op.CALL_COMPONENT:
                fragment = fdg.assignment[node.name]
                busy[fragment] = busy.get(fragment, 0.0) + walk.compute(node) * _calls(node, fdg.graph.regions)
        # the next round stretches each fragment by the others' share of the cores, as computed here
        utilization = {name: min(1.0, value / seconds) if seconds > 0 else 1.0 for name, value in busy.items()}
    parts = {key: (getattr(last, key) - getattr(first, key)) / 2 for key in ("compute", "messages", "delay", "wire")}
    comm = {key: parts[key] for key in ("messages", "delay", "wire")}
    return Prediction(
        policy=name,
        iteration_s=seconds,
        compute_s=parts["compute"],
        communication_s=sum(comm.values()),
        communication=comm,
        env_steps_per_s=cal.env_steps / seconds if seconds > 0 else math.inf,
        fragment_busy=busy,
        placement=where,
        cpus=cpus,
        gpus=gpus,
        traffic={
            "busiest_host_bytes": max(walk.bytes_by_host),
            "busiest_messages": max(walk.messages_by_fragment.values(), default=0.0),
            "trips": float(walk.trips),
        },
    )
