"""The in-process runtime used by the ``local`` policy: one fragment, one
replica, run by its executor in the driver process, with no Ray at all."""

from __future__ import annotations

from typing import Any

from fragments._fdg import FragmentedGraph
from fragments._program import build_program
from fragments.executors import get_executor
from msrl._runtime import IterationResult


class LocalRuntime:
    """Runs the single fragment of an in-process policy; same interface as the Ray runtime."""

    def __init__(self, fdg: FragmentedGraph, algorithm: Any) -> None:
        (fragment,) = fdg.fragments.values()
        self.components = algorithm.components()
        executor_cls = get_executor(fragment.spec.executor)
        self.executor = executor_cls(build_program(fdg, fragment.name), self.components, fdg.graph.components, fragment.spec)
        self.executor.setup()
        self.components = self.executor.components  # the executor may swap in another env backend

    def run_iteration(self, more: bool = False) -> IterationResult:
        output = self.executor.run()
        timings, env_steps = self.executor.take_stats()
        metrics: dict[str, float] = {}
        for component in self.components.values():
            metrics.update(component.metrics())
        return IterationResult(output=output, component_metrics=metrics, timings=timings, env_steps=env_steps)

    def state_dict(self) -> dict[str, Any]:
        return {name: component.state_dict() for name, component in self.components.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, component in self.components.items():
            component.load_state_dict(state.get(name, {}))

    def close(self) -> None:
        self.executor.close()
