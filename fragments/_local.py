"""The in-process runtime used by the ``local`` policy: one fragment, one
replica, built and run by its executor in the driver process, with no Ray at all."""

from __future__ import annotations

from typing import Any

from fragments._build import BuildRecipe, build_replica
from fragments._fdg import FragmentedGraph
from fragments._runtime import IterationResult
from fragments.executors import get_executor


class LocalRuntime:
    """Runs the single fragment of an in-process policy; same interface as the Ray runtime.

    ``algorithm`` and ``components`` are the live objects (every component of the
    run), for callers that evaluate or inspect them between iterations."""

    def __init__(self, recipe: BuildRecipe, fdg: FragmentedGraph) -> None:
        (fragment,) = fdg.fragments.values()
        get_executor(fragment.spec.executor).check_available(fragment.spec)
        self.replica = build_replica(recipe, fdg, fragment.name, 0)
        self.algorithm = self.replica.algorithm
        self.components = self.replica.components
        self.executor = self.replica.start(fdg)

    def run_iteration(self, more: bool = False) -> IterationResult:
        report = self.replica.iterate()
        return IterationResult(
            output=report.output,
            component_metrics=report.metrics,
            timings=report.timings,
            env_steps=report.env_steps,
            compiling=report.compiling,
            compiled=dict(report.compiled),
        )

    def state_dict(self) -> dict[str, Any]:
        return {name: component.state_dict() for name, component in self.components.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, component in self.components.items():
            component.load_state_dict(state.get(name, {}))

    def close(self) -> None:
        self.executor.close()
