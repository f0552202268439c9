"""Start-up: join a cluster or start an embedded Ray, reserve one placement group, spawn one
fragment-worker actor per fragment replica in its bundle, and connect the workers to each other
(same-node sockets, the gradient stores of replicated learners).  ``Workers.close`` undoes it all,
also for a start that failed half way."""

from __future__ import annotations

import math
import os
import shutil
import sys
from typing import Any

from cluster._callreply import REPLY_SLOTS, CallRoutes, call_routes
from cluster._connect import connect
from cluster._liveness import get_each
from cluster._placement import create_placement_group, demand_of
from fragments import BuildRecipe, FragmentedGraph
from msrl.core import ConfigError, InterfaceOp
from policies import DistributionPolicy

MAX_CONCURRENCY = 8  # queued iterations waiting on the compute thread, deliveries, close
MAX_CPUS_PER_CORE = 4
"""The embedded Ray offers a policy up to this many logical CPUs per core: its fragments then take
turns on the cores (a 3-CPU preset on a 2-core laptop), and beyond it they would mostly wait, each a
process holding its own memory (16 replicas on 2 cores: 17 processes of a few hundred MB)."""

Endpoints = dict[str, list[tuple[str, str | None]]]
"""Fragment -> each replica's (Ray node id, same-node socket path or ``None``)."""


class Workers:
    """The run's fragment-worker actors, started and connected (``handles``: fragment -> one actor
    handle per replica, in replica order), and what they share: the placement group, the socket
    endpoints and the gradient stores.  ``stale_ok`` (from the schedule) names, per fragment, the
    received values its replicas may take stale.  ``call_reply=False`` sends every value to another
    node as a one-way ``deliver``, never as a call and reply (``cluster._callreply``): for
    comparisons, the results are the same."""

    def __init__(
        self,
        recipe: BuildRecipe,
        fdg: FragmentedGraph,
        address: str | None,
        stale_ok: dict[str, set[str]],
        call_reply: bool = True,
    ) -> None:
        self.handles: dict[str, list[Any]] = {}
        self.endpoints: Endpoints = {}
        self.stores: list[Any] = []
        start_or_join(address, fdg.policy)
        self.group: Any = create_placement_group(fdg.policy)
        try:
            self._spawn(recipe, fdg)
            self._connect(fdg, stale_ok, call_routes(fdg, stale_ok) if call_reply else {})
        except BaseException:
            self.close()
            raise

    def _spawn(self, recipe: BuildRecipe, fdg: FragmentedGraph) -> None:
        """One actor per replica, each in its own bundle of the placement group (in policy order)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from cluster._worker import FragmentWorker

        # liveness checks get their own thread: they are answered even with every other one busy; calls
        # waiting for their answer get their own threads (cluster._callreply), so they never hold up the
        # rest.  ray.remote's stubs list only the task options, not an actor's concurrency ones.
        groups = {"liveness": 1, "reply": REPLY_SLOTS}
        worker_cls = ray.remote(max_concurrency=MAX_CONCURRENCY, concurrency_groups=groups)(  # type: ignore[call-overload]
            FragmentWorker
        )
        bundle = 0
        for name, fragment in fdg.fragments.items():
            spec = fragment.spec
            self.handles[name] = []
            for replica in range(spec.replicas):
                strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle)
                self.handles[name].append(
                    worker_cls.options(
                        **actor_resources(spec.resources),
                        scheduling_strategy=strategy,
                        name=None,
                    ).remote(recipe, fdg, name, replica)
                )
                bundle += 1

    def _connect(self, fdg: FragmentedGraph, stale_ok: dict[str, set[str]], routes: dict[str, CallRoutes]) -> None:
        """Every worker's endpoint first (which raises a worker's build error), then every worker
        wired to its peers, with its fragment's call-and-reply routes."""
        import ray

        from cluster._collective import KeyValueStore

        store_cls = ray.remote(num_cpus=0)(KeyValueStore)
        stores = {i.src: store_cls.remote() for i in fdg.interfaces if i.op is InterfaceOp.ALL_REDUCE}
        self.stores = list(stores.values())
        endpoints = {name: get_each([h.endpoint.remote() for h in handles]) for name, handles in self.handles.items()}
        self.endpoints = endpoints
        calls = []
        for name, handles in self.handles.items():
            for handle in handles:
                calls.append(
                    handle.connect.remote(
                        self.handles, stale_ok.get(name, set()), stores.get(name), endpoints, routes.get(name, {})
                    )
                )
        get_each(calls)

    def close(self) -> None:
        """Stop every worker (letting each remove its socket, without waiting on a stuck one), the
        gradient stores and the placement group."""
        import ray
        from ray.util.placement_group import remove_placement_group

        handles = [h for group in self.handles.values() for h in group]
        if handles:  # let workers remove their sockets; do not wait on one that is stuck
            ray.wait([h.close.remote() for h in handles], num_returns=len(handles), timeout=2.0)
        for handle in handles:
            ray.kill(handle)
        _remove_socket_dirs(self.endpoints)  # those of workers that died or were stuck
        for store in self.stores:
            ray.kill(store)
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None
        self.handles = {}


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


def start_or_join(address: str | None, policy: DistributionPolicy) -> None:
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


def _remove_socket_dirs(endpoints: Endpoints) -> None:
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
