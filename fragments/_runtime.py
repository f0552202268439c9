"""What a runtime hands the run loop after each iteration, and the interface every
runtime offers: ``LocalRuntime`` here (in-process) and ``cluster.RayRuntime``
(Ray actors).  The run loop sees only this, so it never needs to know which
process layout backs a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class IterationResult:
    """One iteration of a whole run: ``output`` is what ``train_step`` returned (from the
    fragment that holds the output node), ``component_metrics`` what the components'
    ``metrics()`` reported (merged over replicas), ``timings`` seconds per phase (env,
    inference, learn, buffer, communication; the slowest replica's) and ``env_steps``
    the environment steps taken by every replica together.  ``fragment_timings`` splits
    ``timings`` by fragment (fragment -> phase -> seconds, the slowest replica's) when
    the run has more than one fragment."""

    output: Any
    component_metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    env_steps: int = 0
    fragment_timings: dict[str, dict[str, float]] = field(default_factory=dict)


class Runtime(Protocol):
    def run_iteration(self, more: bool = False) -> IterationResult:
        """``more``: another call follows with no ``state_dict``/``load_state_dict`` in between,
        so the runtime may start the next iteration early."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...
