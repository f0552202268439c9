"""``RayRuntime``: runs a fragmented graph as one Ray actor per fragment
replica inside one placement group, behind the same interface as the
in-process ``LocalRuntime``.

It is made of three parts, each in its own module: start-up (``Workers``:
join or start Ray, place, spawn and connect the workers), the schedule (a
``SyncSchedule`` or an ``AsyncSchedule`` from ``SCHEDULES``, by the policy's
mode: the only place the modes differ) and liveness (``Liveness``: every
wait on a worker is bounded, a lost one is a ``WorkerLostError`` the run
loop restarts from).  What is left here is the runtime interface: iterations,
state for checkpoints, placement for reports, and closing.
"""

from __future__ import annotations

import math
import time
from typing import Any

from cluster._hosts import node_addresses
from cluster._liveness import LIVENESS_TIMEOUT_S, Liveness, check_head
from cluster._placement import describe_placement
from cluster._schedule import SCHEDULES
from cluster._startup import Workers
from fragments import BuildRecipe, FragmentedGraph, IterationResult, ReplicaId


class RayRuntime:
    """The Ray runtime of a fragmented graph (``fragments.Runtime``).  ``workers`` is fragment ->
    one actor handle per replica.  ``call_reply=False`` turns off the call-and-reply route between
    nodes (``cluster._callreply``), for comparisons: what is computed is the same."""

    def __init__(
        self,
        recipe: BuildRecipe,
        fdg: FragmentedGraph,
        address: str | None = None,
        liveness_timeout_s: float = LIVENESS_TIMEOUT_S,
        call_reply: bool = True,
    ) -> None:
        self.fdg, self.policy = fdg, fdg.policy
        self.output_fragment = fdg.assignment[fdg.graph.output.name]
        schedule = SCHEDULES[self.policy.mode]
        self.started = Workers(recipe, fdg, address, schedule.stale_ok(fdg, self.output_fragment), call_reply)
        self.workers = self.started.handles
        addresses = node_addresses()
        where = {
            ReplicaId(name, replica): f"node {addresses.get(node, '?')}"
            for name, replicas in self.started.endpoints.items()
            for replica, (node, _) in enumerate(replicas)
        }
        self.liveness = Liveness(self.workers, liveness_timeout_s, where)
        self.schedule = schedule(self.workers, self.output_fragment, self.liveness)

    # -- iterations ----------------------------------------------------------------------------------
    def run_iteration(self, more: bool = False) -> IterationResult:
        """One iteration of the output fragment (the learner), with what every other replica
        finished meanwhile (see the schedule of the policy's mode).

        ``more`` promises another call with no state read or write in between: a sync policy
        then queues the next iteration on every worker now.  It has no effect on what is
        computed."""
        return self.schedule.merge(self.schedule.run_iteration(more))

    # -- placement -----------------------------------------------------------------------------------
    def draining(self) -> dict[str, float]:
        """Node address -> seconds left to its deadline (``inf``: none given), for every node that
        holds a replica of this run and that Ray is draining (``ray drain-node``; the autoscaler's
        preemption and idle termination). Ray schedules nothing new on such a node."""
        import ray._private.state

        try:  # Ray has no public call for it; Ray Serve and Ray Data read it here too
            drained = ray._private.state.state.get_draining_nodes()
        except Exception:  # noqa: BLE001 - a Ray without it, or a GCS that does not answer now: nothing known
            return {}
        ours = {node for replicas in self.started.endpoints.values() for node, _ in replicas}
        if not ours.intersection(drained):
            return {}
        addresses = node_addresses()
        now_ms = time.time() * 1000
        return {
            addresses.get(node, node[:8]): math.inf if not deadline_ms else max(0.0, (deadline_ms - now_ms) / 1000)
            for node, deadline_ms in drained.items()
            if node in ours
        }

    def placement(self) -> dict[str, list[str]]:
        """Fragment -> the Ray node id of each replica (for tests and ``msrl graph``)."""
        return self._each("node_id")

    def worker_pids(self) -> dict[str, list[int]]:
        """Fragment -> the process id of each replica's worker (on its node)."""
        return self._each("pid")

    def placement_report(self) -> list[str]:
        """One line per fragment replica, in policy order, naming the node it runs on (IP
        address and the first 8 hex digits of its Ray node id) and the resources it holds:
        ``fragment learner[0] on node 10.0.0.5 (a1b2c3d4) with 1 CPU, 1 learner_node``.
        Nothing is printed here; the caller shows the lines."""
        import ray

        addresses = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
        return describe_placement(self.policy, self.placement(), addresses)

    # -- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Each component's state from replica 0 of its fragment (what ``msrl eval``
        loads), plus every replica's state under ``_replicas`` for exact resume."""
        self.schedule.drain()
        replicas = self._each("state_dict")
        state: dict[str, Any] = {}
        for per_replica in replicas.values():
            state.update(per_replica[0])
        state["_replicas"] = replicas
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a checkpoint: each replica its own state, or, for an elastic fragment that the
        checkpoint holds with another number of replicas, its share of theirs (regrouped)."""
        import ray

        self.schedule.drain()
        replicas = state.get("_replicas")
        calls: list[tuple[ReplicaId, Any]] = []
        for name, handles in self.workers.items():
            saved = replicas.get(name) if replicas else None
            if replicas is not None and (saved is None or len(saved) != len(handles)):
                if saved and self.policy.fragment(name).elastic is not None:
                    shared = ray.put(saved)  # once, for every replica to read its share from
                    calls += [
                        (ReplicaId(name, replica), handle.load_regrouped.remote(shared, len(handles)))
                        for replica, handle in enumerate(handles)
                    ]
                    continue
                raise ValueError(
                    f"the checkpoint has {len(saved or [])} replicas of fragment {name!r}, this policy {len(handles)}"
                )
            for replica, handle in enumerate(handles):
                calls.append(
                    (ReplicaId(name, replica), handle.load_state_dict.remote(saved[replica] if saved else state))
                )
        self.liveness.wait_all(calls)

    def close(self) -> None:
        check_head(self.liveness.timeout_s)  # stopping workers needs the head: without it, Ray would hang
        self.started.close()
        self.workers = {}

    def _each(self, method: str) -> dict[str, list[Any]]:
        """Fragment -> what ``method`` returns on each of its replicas, waited on with liveness checks."""
        return {
            name: self.liveness.wait_all(
                [(ReplicaId(name, r), getattr(h, method).remote()) for r, h in enumerate(handles)]
            )
            for name, handles in self.workers.items()
        }
