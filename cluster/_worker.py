"""The fragment-worker actor: one per fragment replica.  It builds the
algorithm's components for its replica, runs its fragment program with the
fragment's executor each iteration, and receives other fragments' values
through its mailbox (a threaded actor, so deliveries land while it runs)."""

from __future__ import annotations

from typing import Any

from fragments._fdg import FragmentedGraph
from fragments._program import build_program
from fragments.executors import get_executor
from cluster._direct import DirectListener, DirectSender
from cluster._transport import Mailbox, RayTransport


class FragmentWorker:
    """Wrapped with ``ray.remote`` by the runtime; every public method is an actor method."""

    def __init__(self, config: Any, fdg: FragmentedGraph, fragment: str, replica: int) -> None:
        from msrl._run import build

        spec = fdg.fragments[fragment].spec
        self.fdg, self.fragment, self.replica = fdg, fragment, replica
        executor_cls = get_executor(spec.executor)
        executor_cls.check_available(spec)
        self.algorithm = build(config, replica=replica, num_replicas=spec.replicas, device=spec.device)
        self.program = build_program(fdg, fragment)
        self.mailbox = Mailbox()
        receives = bool(self.program.recvs())
        self.listener = DirectListener(self.mailbox, f"{fragment}-{replica}") if receives else None
        self.senders: dict[tuple[str, int], DirectSender] = {}
        self.executor_cls, self.spec = executor_cls, spec
        self.executor = None
        self.transport = None
        self.grad_sync = None

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def endpoint(self) -> tuple[str, str | None]:
        """This replica's node and, if it receives values, its same-node socket."""
        return self.node_id(), self.listener.path if self.listener is not None else None

    def connect(self, peers: dict[str, list[Any]], stale_ok: set[str], store: Any = None,
                endpoints: dict[str, list[tuple[str, str | None]]] | None = None) -> None:
        """Wire the transport to every other replica (over sockets to same-node ones), start the
        executor and, for replicated learners, join the gradient all-reduce group."""
        node = self.node_id()
        for name, replicas in (endpoints or {}).items():
            for replica, (peer_node, path) in enumerate(replicas):
                if path is not None and peer_node == node and name != self.fragment:
                    self.senders[(name, replica)] = DirectSender(path)
        self.transport = RayTransport(self.fdg, self.program, self.replica, self.mailbox, peers, stale_ok=stale_ok,
                                      direct=self.senders)
        mine = self.fdg.fragments[self.fragment].components
        components = {name: c for name, c in self.algorithm.components().items() if name in mine}
        self.executor = self.executor_cls(self.program, components, self.fdg.graph.components, self.spec,
                                          replica=self.replica, transport=self.transport)
        self.executor.setup()
        if store is not None:
            from cluster._collective import GradientAllReduce, learner_group

            group = learner_group(store, f"{self.fragment}/grads/", self.replica, self.spec.replicas, self.address(),
                                  self.spec.device)
            for name, component in self.executor.components.items():
                if self.fdg.graph.components[name] == "learner":
                    component.grad_sync = self.grad_sync = GradientAllReduce(group, self.spec.replicas)

    def deliver(self, node: str, src: int, seq: int, payload: Any) -> None:
        self.mailbox.put(node, src, seq, payload)

    def run_iteration(self) -> dict[str, Any]:
        lag = self.transport.policy_lag
        output = self.executor.run()
        timings, env_steps = self.executor.take_stats()
        if self.grad_sync is not None:  # the all-reduce ran inside learn(): move its time to communication
            spent, self.grad_sync.seconds = self.grad_sync.seconds, 0.0
            timings["learn"] = timings.get("learn", 0.0) - spent
            timings["communication"] = timings.get("communication", 0.0) + spent
        metrics: dict[str, float] = {}
        for component in self.executor.components.values():
            metrics.update(component.metrics())
        return {"output": output, "metrics": metrics, "timings": timings, "env_steps": env_steps, "policy_lag": lag}

    def state_dict(self) -> dict[str, Any]:
        return {name: self.executor.components[name].state_dict() for name in self.fdg.fragments[self.fragment].components}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self.fdg.fragments[self.fragment].components:
            self.executor.components[name].load_state_dict(state.get(name, {}))

    def close(self) -> None:
        self.mailbox.close()
        for sender in self.senders.values():
            sender.close()
        if self.listener is not None:
            self.listener.close()
        if self.executor is not None:
            self.executor.close()
