"""The fragment-worker actor: one per fragment replica.  It builds its
fragment's components, and only those, for its replica
(``fragments.build_replica``), runs its fragment program with the fragment's
executor each iteration, and receives other fragments' values through its
mailbox (a threaded actor, so deliveries land while it runs)."""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from cluster._callreply import CallRoutes, Reply, ReplySlots
from cluster._direct import DirectListener, DirectSender
from cluster._transport import Mailbox, MailboxClosed, RayTransport
from fragments import BuildRecipe, FragmentedGraph, Replica, ReplicaId, ReplicaReport, build_replica
from fragments.executors import get_executor
from msrl.core import MsrlError, Role

if TYPE_CHECKING:
    from cluster._collective import GradientAllReduce
    from fragments.executors import Executor


class ComputeThread:
    """One thread that runs the worker's component work, jobs in submission order.

    Components are wired up, run, saved and restored on it alone (they are built in the actor's
    constructor).  Spread over the actor's thread pool, each thread's malloc arena handed memory
    back and forth with the OS, and the learner's update ran 25% slower.  And because the driver
    queues the next iteration while this one runs, the thread starts it the moment this one ends,
    without waiting for Ray to dispatch a call.
    """

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.numbered_run = 0  # numbered jobs started so far
        self.finished: dict[int, tuple[bool, Any]] = {}  # job number -> (ok, result or error)
        self.finished_cond = threading.Condition()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the compute thread after the jobs before it; return or raise its result."""
        done, box = threading.Event(), dict[str, Any]()
        self.jobs.put((fn, args, done, box))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def run_numbered(self, number: int, fn: Callable[[], Any]) -> Any:
        """Queue ``fn`` and return the result of numbered job ``number`` (from 0).

        Numbered jobs are numbered in the order they reach the queue, not by the caller: when
        two callers race to queue (two iterations the driver queued, whose calls reached the
        actor's threads in either order), the jobs still run one after the other and each
        caller gets the job it asked for."""
        self.run(self._run_next, fn)
        with self.finished_cond:
            while number not in self.finished:
                self.finished_cond.wait()
            ok, value = self.finished.pop(number)
        if not ok:
            raise value
        return value

    def _run_next(self, fn: Callable[[], Any]) -> None:
        number, self.numbered_run = self.numbered_run, self.numbered_run + 1
        try:
            outcome = (True, fn())
        except BaseException as exc:  # handed to the caller of that number, which re-raises it
            outcome = (False, exc)
        with self.finished_cond:
            self.finished[number] = outcome
            self.finished_cond.notify_all()

    def _loop(self) -> None:
        while (job := self.jobs.get()) is not None:
            fn, args, done, box = job
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # handed to the caller, which re-raises it
                box["error"] = exc
            finally:
                done.set()

    def close(self) -> None:
        self.jobs.put(None)


class FragmentWorker:
    """Wrapped with ``ray.remote`` by the runtime; every public method is an actor method.  The
    actor is threaded: deliveries land while an iteration waits in a receive, and the component
    work itself runs on the worker's ``ComputeThread``."""

    def __init__(self, recipe: BuildRecipe, fdg: FragmentedGraph, fragment: str, replica: int) -> None:
        spec = fdg.fragments[fragment].spec
        self.fdg, self.fragment, self.replica = fdg, fragment, replica
        self.listener: DirectListener | None = None
        try:
            get_executor(spec.executor).check_available(spec)
            self.built = build_replica(recipe, fdg, fragment, replica)  # this fragment's components, and nothing else
        except MsrlError as exc:
            # Reported by the first call (``endpoint``) as a task error, which reaches the driver as the
            # MsrlError itself: raised here, Ray would report a failed actor creation, a traceback.
            self.init_error: MsrlError | None = exc
            return
        self.init_error = None
        self.program = self.built.program
        self.mailbox = Mailbox()
        self.replies = ReplySlots()  # calls from other nodes waiting for this replica's answer
        receives = bool(self.program.recvs())
        self.listener = DirectListener(self.mailbox, f"{fragment}-{replica}") if receives else None
        if self.listener is not None:  # a worker Ray ends gracefully (its driver gone) removes its socket too
            atexit.register(self.listener.close)
        self.senders: dict[ReplicaId, DirectSender] = {}
        self.spec = spec
        self.executor: Executor | None = None  # made, with its transport, when the driver connects the workers
        self.transport: RayTransport | None = None
        self.grad_sync: GradientAllReduce | None = None
        self.compute = ComputeThread(f"{fragment}-{replica}-compute")

    def ping(self) -> bool:
        """The driver's liveness check (on a thread of its own): answered while an iteration runs,
        not when the process is dead, stopped or cut off."""
        return True

    def pid(self) -> int:
        """This replica's process id (chaos tests and operators signal it)."""
        return os.getpid()

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def assigned_resources(self) -> dict[str, float]:
        """What Ray assigned this replica's actor (CPU, memory, custom resources...), as named in its policy."""
        import ray

        return dict(ray.get_runtime_context().get_assigned_resources())

    def address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def endpoint(self) -> tuple[str, str | None]:
        """This replica's node and, if it receives values, its same-node socket (the first call the
        driver makes: it raises the error the constructor met, if any)."""
        if self.init_error is not None:
            raise self.init_error
        return self.node_id(), self.listener.path if self.listener is not None else None

    def connect(
        self,
        peers: dict[str, list[Any]],
        stale_ok: set[str],
        store: Any = None,
        endpoints: dict[str, list[tuple[str, str | None]]] | None = None,
        calls: CallRoutes | None = None,
    ) -> None:
        """Wire the transport to every other replica (over sockets to same-node ones, with
        ``calls`` as call and reply to other nodes), start the executor and, for replicated
        learners, join the gradient all-reduce group."""
        self.compute.run(self._connect, peers, stale_ok, store, endpoints, calls, self.node_id(), self.address())

    def _connect(
        self,
        peers: dict[str, list[Any]],
        stale_ok: set[str],
        store: Any,
        endpoints: dict[str, list[tuple[str, str | None]]] | None,
        calls: CallRoutes | None,
        node: str,
        address: str,
    ) -> None:
        for name, replicas in (endpoints or {}).items():
            for replica, (peer_node, path) in enumerate(replicas):
                if path is not None and peer_node == node and name != self.fragment:
                    self.senders[ReplicaId(name, replica)] = DirectSender(path)
        self.transport = RayTransport(
            self.fdg,
            self.program,
            self.replica,
            self.mailbox,
            peers,
            stale_ok=stale_ok,
            direct=self.senders,
            calls=calls,
            replies=self.replies,
        )
        self.executor = self.built.start(self.fdg, self.transport)
        if store is not None:
            self.grad_sync = _join_gradient_group(self.built, self.fdg, store, address)

    def deliver(self, node: str, src: int, seq: int, payload: Any) -> None:
        self.mailbox.put(node, src, seq, payload)

    def deliver_and_await(self, node: str, src: int, seq: int, payload: Any, reply: str, caller: str) -> Reply | None:
        """``deliver``, then this replica's next ``reply`` to ``caller``'s replica ``src`` as the
        call's result (``None`` if this worker closes first).  Called in the ``reply``
        concurrency group, never the default one: see ``cluster._callreply``."""
        slot = self.replies.open(reply, caller, src)
        self.mailbox.put(node, src, seq, payload)
        return self.replies.wait(slot)

    def transport_counts(self) -> dict[str, int]:
        """How many payloads this replica sent each way (``socket``, ``deliver``, ``call``, ``reply``)."""
        return dict(self.transport.counts) if self.transport is not None else {}

    def run_iteration(self, number: int) -> ReplicaReport:
        """This worker's iteration ``number`` (from 0); see ``ComputeThread.run_numbered`` for
        why the number is needed."""
        try:
            return self.compute.run_numbered(number, self._iterate)
        except MailboxClosed:  # closed while it waited on a peer (the run is being torn down): nothing to report
            return ReplicaReport(self.fragment, self.replica, aborted=True)

    def _iterate(self) -> ReplicaReport:
        assert self.transport is not None, "run_iteration before connect"
        report = self.built.iterate(policy_lag=self.transport.policy_lag)  # the lag of the weights it acts with
        if self.grad_sync is not None:  # the all-reduce ran inside learn(): move its time to communication
            spent, self.grad_sync.seconds = self.grad_sync.seconds, 0.0
            report = report.with_time_moved("learn", "communication", spent)
        return report

    def state_dict(self) -> dict[str, Any]:
        """Each of this fragment's components' state, tensors on the CPU: the driver (checkpoints,
        evaluation) may have no GPU even where this replica has one."""
        return self.compute.run(
            lambda: _to_cpu(
                {
                    name: self.built.components[name].state_dict()
                    for name in self.fdg.fragments[self.fragment].components
                }
            )
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        def load() -> None:
            for name in self.fdg.fragments[self.fragment].components:
                self.built.components[name].load_state_dict(state.get(name, {}))

        self.compute.run(load)

    def load_regrouped(self, states: list[dict[str, Any]], count: int) -> None:
        """Load this replica's share of a checkpoint that holds ``states``, one per replica of this
        fragment when it ran with another count (``Component.load_regrouped``)."""

        def load() -> None:
            for name in self.fdg.fragments[self.fragment].components:
                self.built.components[name].load_regrouped([s.get(name, {}) for s in states], self.replica, count)

        self.compute.run(load)

    def close(self) -> None:
        if self.init_error is not None:
            return
        self.mailbox.close()
        self.replies.close()
        self.compute.close()
        for sender in self.senders.values():
            sender.close()
        if self.listener is not None:
            self.listener.close()
        if self.executor is not None:
            self.executor.close()


def _join_gradient_group(built: Replica, fdg: FragmentedGraph, store: Any, address: str) -> GradientAllReduce:
    """Join the all-reduce group of the replicated learner fragment ``built`` belongs to (this node's
    ``address``), and hand its learners the hook that averages their gradients across replicas."""
    from cluster._collective import GradientAllReduce, learner_group

    spec = fdg.fragments[built.fragment].spec
    group, group_store = learner_group(
        store, f"{built.fragment}/grads/", built.replica, spec.replicas, address, spec.device
    )
    grad_sync = GradientAllReduce(group, spec.replicas, group_store)
    for name, component in built.components.items():
        if fdg.graph.components[name] is Role.LEARNER:
            component.grad_sync = grad_sync
    return grad_sync


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu() if value.device.type != "cpu" else value
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(item) for item in value)
    return value
