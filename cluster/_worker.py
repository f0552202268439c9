"""The fragment-worker actor: one per fragment replica.  It builds the
algorithm's components for its replica, runs its fragment program with the
fragment's executor each iteration, and receives other fragments' values
through its mailbox (a threaded actor, so deliveries land while it runs)."""

from __future__ import annotations

import os
from typing import Any

from fragments._fdg import FragmentedGraph
from fragments._program import build_program
from fragments.executors import get_executor
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
        self.executor_cls, self.spec = executor_cls, spec
        self.executor = None
        self.transport = None
        self.iterations = 0

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def connect(self, peers: dict[str, list[Any]], stale_ok: set[str], store: Any = None, group_host: str = "") -> None:
        """Wire the transport to every other replica, start the executor and,
        for replicated learners, join the gradient all-reduce group."""
        self.transport = RayTransport(self.fdg, self.program, self.replica, self.mailbox, peers, stale_ok=stale_ok)
        mine = self.fdg.fragments[self.fragment].components
        components = {name: c for name, c in self.algorithm.components().items() if name in mine}
        self.executor = self.executor_cls(self.program, components, self.fdg.graph.components, self.spec,
                                          replica=self.replica, transport=self.transport)
        self.executor.setup()
        if store is not None:
            from cluster._collective import GradientAllReduce, gloo_group

            group = gloo_group(store, f"{self.fragment}/grads/", self.replica, self.spec.replicas, self.address())
            for name, component in self.executor.components.items():
                if self.fdg.graph.components[name] == "learner":
                    component.grad_sync = GradientAllReduce(group, self.spec.replicas)

    def deliver(self, node: str, src: int, seq: int, payload: Any) -> None:
        self.mailbox.put(node, src, seq, payload)

    def run_iteration(self) -> dict[str, Any]:
        lag = self.transport.policy_lag
        output = self.executor.run()
        timings, env_steps = self.executor.take_stats()
        metrics: dict[str, float] = {}
        for component in self.executor.components.values():
            metrics.update(component.metrics())
        self.iterations += 1
        return {"output": output, "metrics": metrics, "timings": timings, "env_steps": env_steps, "policy_lag": lag,
                "pid": os.getpid()}

    def state_dict(self) -> dict[str, Any]:
        return {name: self.executor.components[name].state_dict() for name in self.fdg.fragments[self.fragment].components}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self.fdg.fragments[self.fragment].components:
            self.executor.components[name].load_state_dict(state.get(name, {}))

    def close(self) -> None:
        self.mailbox.close()
        if self.executor is not None:
            self.executor.close()
