"""``RayRuntime``: runs a fragmented graph as one Ray actor per fragment
replica inside one placement group, behind the same interface as the
in-process ``LocalRuntime``.

Sync policies run every replica's iteration k together.  Async policies keep
the replicas that do not produce the run's output (the actors) one iteration
ahead of those that do (the learner): their weights input is taken stale-ok,
so they collect the next rollout while the learner learns on the last one.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from typing import Any

from cluster._connect import connect
from cluster._placement import create_placement_group, demand_of, describe_placement
from cluster._reports import merge_reports
from fragments import BuildRecipe, FragmentedGraph, IterationResult, ReplicaReport
from msrl.core import GLOBAL, ConfigError, InterfaceOp, MsrlError, WorkerLostError

MAX_CONCURRENCY = 8  # queued iterations waiting on the compute thread, deliveries, close
MAX_CPUS_PER_CORE = 4
"""The embedded Ray offers a policy up to this many logical CPUs per core: its fragments then take
turns on the cores (a 3-CPU preset on a 2-core laptop), and beyond it they would mostly wait, each a
process holding its own memory (16 replicas on 2 cores: 17 processes of a few hundred MB)."""
LIVENESS_POLL_S = 2.0
"""A wait on workers that takes longer than this checks that every worker still answers."""
LIVENESS_TIMEOUT_S = 30.0
"""Default bound on a liveness check: a worker that does not answer within it counts as stuck."""


class RayRuntime:
    def __init__(
        self,
        recipe: BuildRecipe,
        fdg: FragmentedGraph,
        address: str | None = None,
        liveness_timeout_s: float = LIVENESS_TIMEOUT_S,
    ) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from cluster._worker import FragmentWorker

        self.fdg, self.policy = fdg, fdg.policy
        self.liveness_timeout_s = liveness_timeout_s
        self.endpoints: dict[str, list[tuple[str, str | None]]] = {}
        _start_or_join(address, self.policy)
        self.group = create_placement_group(self.policy)
        self.workers: dict[str, list[Any]] = {}
        self.output_fragment = fdg.assignment[fdg.graph.output.name]
        try:
            # liveness checks get their own thread: they are answered even with every other one busy
            worker_cls = ray.remote(max_concurrency=MAX_CONCURRENCY, concurrency_groups={"liveness": 1})(FragmentWorker)
            bundle = 0
            for name, fragment in fdg.fragments.items():
                spec = fragment.spec
                self.workers[name] = []
                for replica in range(spec.replicas):
                    strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle)
                    self.workers[name].append(
                        worker_cls.options(
                            **actor_resources(spec.resources),
                            scheduling_strategy=strategy,
                            name=None,
                        ).remote(recipe, fdg, name, replica)
                    )
                    bundle += 1
            self._connect()
        except BaseException:
            self.close()
            raise
        self.pending: dict[tuple[str, int], list[Any]] = {}  # per replica, its submitted iterations in order
        self.submitted: dict[tuple[str, int], int] = {}
        self.taken: dict[tuple[str, int], int] = {}  # per replica, how many of its results were collected
        self.finished: list[ReplicaReport] = []
        self.leader_iterations = 0
        self.last_lag = 0.0

    # -- setup ---------------------------------------------------------------------------------------
    def _connect(self) -> None:
        import ray

        stale_ok = self._stale_ok_nodes()
        from cluster._collective import KeyValueStore

        store_cls = ray.remote(num_cpus=0)(KeyValueStore)
        stores = {i.src: store_cls.remote() for i in self.fdg.interfaces if i.op is InterfaceOp.ALL_REDUCE}
        self.stores = list(stores.values())
        endpoints = {name: _get_each([h.endpoint.remote() for h in handles]) for name, handles in self.workers.items()}
        self.endpoints = endpoints
        calls = []
        for name, handles in self.workers.items():
            for handle in handles:
                calls.append(
                    handle.connect.remote(self.workers, stale_ok.get(name, set()), stores.get(name), endpoints)
                )
        _get_each(calls)

    def _stale_ok_nodes(self) -> dict[str, set[str]]:
        """Async: the values the output fragment broadcasts back (weights) may be stale for their receivers."""
        if self.policy.mode != "async":
            return {}
        stale: dict[str, set[str]] = {}
        for interface in self.fdg.interfaces:
            if (
                interface.src == self.output_fragment
                and interface.dst != self.output_fragment
                and interface.kind == GLOBAL
            ):
                stale.setdefault(interface.dst, set()).add(interface.ref.node)
        return stale

    def placement(self) -> dict[str, list[str]]:
        """Fragment -> the Ray node id of each replica (for tests and ``msrl graph``)."""
        return {
            name: self._await([((name, r), h.node_id.remote()) for r, h in enumerate(handles)])
            for name, handles in self.workers.items()
        }

    def worker_pids(self) -> dict[str, list[int]]:
        """Fragment -> the process id of each replica's worker (on its node)."""
        return {
            name: self._await([((name, r), h.pid.remote()) for r, h in enumerate(handles)])
            for name, handles in self.workers.items()
        }

    def placement_report(self) -> list[str]:
        """One line per fragment replica, in policy order, naming the node it runs on (IP
        address and the first 8 hex digits of its Ray node id) and the resources it holds:
        ``fragment learner[0] on node 10.0.0.5 (a1b2c3d4) with 1 CPU, 1 learner_node``.
        Nothing is printed here; the caller shows the lines."""
        import ray

        addresses = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
        return describe_placement(self.policy, self.placement(), addresses)

    # -- iterations ----------------------------------------------------------------------------------
    def run_iteration(self, more: bool = False) -> IterationResult:
        """One iteration of the output fragment (the learner), with what every
        other replica finished meanwhile.  Waits on any replica, so a failing
        one is reported at once instead of leaving the others blocked.

        ``more`` promises another call with no state read or write in between:
        a sync policy then queues the next iteration on every worker now, so
        each starts it the moment it finishes this one instead of after a round
        trip through the driver.  It has no effect on what is computed."""
        sync = self.policy.mode == "sync"
        done = self.leader_iterations  # this call completes the leader's iteration ``done``
        for key in self._keys():
            if not self.pending.get(key) and self._may_submit(key, done):
                self._submit(key)
        if more and sync:
            for key in self._keys():
                if len(self.pending[key]) < 2:
                    self._submit(key)
        results: list[ReplicaReport] = self.finished
        self.finished = []
        # Sync: one result from every replica.  Async: the leader's, taking the actors' as they come
        # (each record reports the actors' iterations up to the leader's, so every record counts steps).
        awaited = set(self._keys()) if sync else {key for key in self._keys() if key[0] == self.output_fragment}
        leader_in = False
        while awaited:
            by_ref = {refs[0]: key for key, refs in self.pending.items() if refs and (key in awaited or not sync)}
            key = by_ref[self._wait_one(list(by_ref))]
            index = self.taken.get(key, 0)
            self.taken[key] = index + 1
            result: ReplicaReport = self._result(key, self.pending[key].pop(0))
            if not sync and key[0] != self.output_fragment and index > done:
                self.finished.append(result)  # a rollout for the next update: reported with it
            else:
                results.append(result)
            awaited.discard(key)
            if not sync:
                leader_in = leader_in or key[0] == self.output_fragment
                if leader_in:
                    # The update consumed every actor's rollout ``done``; those iterations have sent
                    # their data and end on older weights, so their reports (env steps) join this
                    # record rather than a later one that would then count no steps.
                    awaited = self._actors_behind(done)
            if not sync and key[0] != self.output_fragment and self._may_submit(key, done):
                self._submit(key)  # actors keep collecting while the learner learns
        self.leader_iterations += 1
        return self._merge(results)

    def _actors_behind(self, iteration: int) -> set[tuple[str, int]]:
        """Async: the actor replicas whose report of ``iteration`` is still to be collected."""
        return {
            key
            for key in self._keys()
            if key[0] != self.output_fragment and self.taken.get(key, 0) <= iteration and self.pending.get(key)
        }

    def _keys(self) -> list[tuple[str, int]]:
        return [(name, replica) for name, handles in self.workers.items() for replica in range(len(handles))]

    def _submit(self, key: tuple[str, int]) -> None:
        number = self.submitted.get(key, 0)
        self.pending.setdefault(key, []).append(self.workers[key[0]][key[1]].run_iteration.remote(number))
        self.submitted[key] = number + 1

    def _may_submit(self, key: tuple[str, int], done: int) -> bool:
        """An actor's iteration j ends on the weights of update j-1, so it may run at
        most one iteration past the leader's current one: whatever is in flight when
        the leader returns can then finish (a checkpoint waits for it) without
        another update."""
        return key[0] == self.output_fragment or self.submitted.get(key, 0) <= done + 1

    def _merge(self, results: list[ReplicaReport]) -> IterationResult:
        merged = merge_reports(results, per_fragment_timings=len(self.workers) > 1)
        if self.policy.mode == "async":
            lags = [r.policy_lag for r in results if r.output is None and not r.aborted]
            if lags:  # an update may land before the rollout that fed it reports back
                self.last_lag = sum(lags) / len(lags)
            merged.component_metrics["policy_lag"] = self.last_lag
        return merged

    def _drain(self) -> None:
        """Let in-flight iterations finish so every replica is between iterations."""
        calls = [(key, ref) for key, queued in self.pending.items() for ref in queued]
        if calls:
            self.finished.extend(self._await(calls))
        for key, queued in self.pending.items():
            self.taken[key] = self.taken.get(key, 0) + len(queued)
        self.pending.clear()

    # -- waiting, with liveness checks -------------------------------------------------------------------
    def _wait_one(self, refs: list[Any]) -> Any:
        """The first of ``refs`` to finish.  While none does, every worker is checked every
        ``LIVENESS_POLL_S``: a dead or stuck one ends the wait with ``WorkerLostError`` (a peer
        blocked on a lost worker would otherwise wait for it forever)."""
        import ray

        while True:
            ready, _ = ray.wait(refs, num_returns=1, timeout=LIVENESS_POLL_S)
            if ready:
                return ready[0]
            self._check_alive()

    def _await(self, calls: list[tuple[tuple[str, int], Any]]) -> list[Any]:
        """The results of ``calls`` ((replica, object ref) pairs) in order, with liveness checks
        while waiting."""
        import ray

        refs = [ref for _, ref in calls]
        while True:
            _, waiting = ray.wait(refs, num_returns=len(refs), timeout=LIVENESS_POLL_S)
            if not waiting:
                return [self._result(key, ref) for key, ref in calls]
            self._check_alive()

    def _result(self, key: tuple[str, int], ref: Any) -> Any:
        """``ray.get`` of one replica's finished call: an msrl error raised in it as itself, the
        replica's death as ``WorkerLostError`` naming it."""
        return _get(ref, who=f"fragment {key[0]}[{key[1]}]")

    def _check_alive(self) -> None:
        """Ping every worker; one that died raises ``WorkerLostError``, and so does one that does not
        answer within ``liveness_timeout_s`` (stopped, hung or cut off), after it is killed."""
        import ray

        pings = {
            (name, replica): handle.ping.options(concurrency_group="liveness").remote()
            for name, handles in self.workers.items()
            for replica, handle in enumerate(handles)
        }
        _, silent = ray.wait(list(pings.values()), num_returns=len(pings), timeout=self.liveness_timeout_s)
        for key, ref in pings.items():
            if ref not in silent:
                self._result(key, ref)
        for key, ref in pings.items():
            if ref in silent:
                ray.kill(self.workers[key[0]][key[1]])
                raise WorkerLostError(
                    f"fragment {key[0]}[{key[1]}] answered no liveness check for "
                    f"{self.liveness_timeout_s:g} s (stopped, hung or cut off); it was killed"
                )

    # -- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Each component's state from replica 0 of its fragment (what ``msrl eval``
        loads), plus every replica's state under ``_replicas`` for exact resume."""
        self._drain()
        replicas = {
            name: self._await([((name, r), h.state_dict.remote()) for r, h in enumerate(handles)])
            for name, handles in self.workers.items()
        }
        state: dict[str, Any] = {}
        for per_replica in replicas.values():
            state.update(per_replica[0])
        state["_replicas"] = replicas
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._drain()
        replicas = state.get("_replicas")
        calls = []
        for name, handles in self.workers.items():
            saved = replicas.get(name) if replicas else None
            if replicas is not None and (saved is None or len(saved) != len(handles)):
                raise ValueError(
                    f"the checkpoint has {len(saved or [])} replicas of fragment {name!r}, this policy {len(handles)}"
                )
            for replica, handle in enumerate(handles):
                calls.append(((name, replica), handle.load_state_dict.remote(saved[replica] if saved else state)))
        self._await(calls)

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        handles = [h for group in getattr(self, "workers", {}).values() for h in group]
        if handles:  # let workers remove their sockets; do not wait on one that is stuck
            ray.wait([h.close.remote() for h in handles], num_returns=len(handles), timeout=2.0)
        for handle in handles:
            ray.kill(handle)
        _remove_socket_dirs(getattr(self, "endpoints", {}))  # those of workers that died or were stuck
        for store in getattr(self, "stores", []):
            ray.kill(store)
        if getattr(self, "group", None) is not None:
            remove_placement_group(self.group)
            self.group = None
        self.workers = {}


def actor_resources(resources: dict[str, float]) -> dict[str, Any]:
    """The options that make a fragment replica's actor hold what its bundle reserved:
    ``num_cpus``, ``num_gpus``, ``memory`` (whole bytes) and every custom resource (a node
    label such as ``learner_node``, or ``accelerator_type:H100``) under ``resources``."""
    options: dict[str, Any] = {"num_cpus": resources.get("CPU", 0.0), "num_gpus": resources.get("GPU", 0.0)}
    if resources.get("memory", 0.0) > 0:
        options["memory"] = int(resources["memory"])
    custom = {key: value for key, value in resources.items() if key not in ("CPU", "GPU", "memory") and value > 0}
    if custom:
        options["resources"] = custom
    return options


def starts_embedded(address: str | None) -> bool:
    """Whether a run given ``address`` would start an embedded Ray on this machine (no address, and
    no Ray connected in this process), so that every replica runs here."""
    if address is not None:
        return False
    ray = sys.modules.get("ray")
    return ray is None or not ray.is_initialized()


_EMBEDDED: dict[str, str | None] = {"session": None}  # the session of the embedded instance this process started


def _start_or_join(address: str | None, policy: Any) -> None:
    """Join ``address``, or start an embedded Ray sized for the policy: on a laptop a
    policy may ask for more logical CPUs than there are cores (its fragments take
    turns), so the local instance gets enough for the request, and says so.  An
    embedded instance this process started for a smaller policy is restarted."""
    import ray

    wanted = math.ceil(demand_of(policy).get("CPU", 0.0))
    if ray.is_initialized():
        ours = _EMBEDDED["session"] == ray.get_runtime_context().get_session_name()
        if not ours or ray.cluster_resources().get("CPU", 0.0) >= wanted:
            return  # a cluster someone else connected to is never restarted
        ray.shutdown()
    if address is not None:
        connect(address)
        return
    cores = os.cpu_count() or 1
    if wanted > MAX_CPUS_PER_CORE * cores:
        raise ConfigError(
            f"policy {policy.name!r} asks for {wanted} CPUs; the embedded Ray on this {cores}-core machine "
            f"offers at most {MAX_CPUS_PER_CORE * cores} ({MAX_CPUS_PER_CORE} per core): use fewer replicas "
            f"or CPUs per replica, or join a cluster with --address"
        )
    if wanted > cores:
        print(
            f"msrl: policy {policy.name!r} asks for {wanted} CPUs on a {cores}-core machine; "
            f"the embedded Ray offers {wanted} logical CPUs",
            file=sys.stderr,
        )
    connect(None, num_cpus=max(cores, wanted))
    _EMBEDDED["session"] = ray.get_runtime_context().get_session_name()


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]


def _remove_socket_dirs(endpoints: dict[str, list[tuple[str, str | None]]]) -> None:
    """Remove the ``msrl-*`` socket directories of this node's workers.  A worker removes its own
    when it closes, but one that was killed (or died) cannot; those on other nodes are left to the
    temporary-file cleanup of their machine."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    for replicas in endpoints.values():
        for peer_node, path in replicas:
            directory = os.path.dirname(path) if path else ""
            if peer_node == node and os.path.basename(directory).startswith("msrl-"):
                shutil.rmtree(directory, ignore_errors=True)


def _get_each(refs: list[Any]) -> list[Any]:
    """``_get`` of every ref, then the first error among them: every replica's result is taken, so
    Ray reports none of the others' errors as unhandled (each replica of a fragment usually fails
    its build the same way)."""
    results, first = [], None
    for ref in refs:
        try:
            results.append(_get(ref))
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the others are taken
            first = first or exc
    if first is not None:
        raise first
    return results


def _get(refs: Any, who: str = "a fragment worker") -> Any:
    """``ray.get`` that re-raises an msrl error from a worker as itself (one clean line for the CLI),
    and a worker's death (not its constructor failing) as ``WorkerLostError`` naming ``who``."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        return ray.get(refs)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, MsrlError):
            raise cause from None
        raise
    except RayActorError as exc:
        if getattr(exc, "actor_init_failed", False):
            raise
        raise WorkerLostError(f"{who} was lost ({_first_line(exc).rstrip('.')})") from None
