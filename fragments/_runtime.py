"""What a runtime hands the run loop after each iteration, and the interface every
runtime offers: ``LocalRuntime`` here (in-process) and ``cluster.RayRuntime``
(Ray actors).  The run loop sees only this, so it never needs to know which
process layout backs a run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ReplicaReport:
    """What one fragment replica hands back for one iteration (``Replica.iterate``), the same from
    the in-process runtime and from a Ray worker: the typed message the driver merges into an
    ``IterationResult``, instead of a dict whose keys every reader must know.

    ``output`` is what ``train_step`` returned where this replica holds the output node (else
    ``None``); ``metrics`` what its components' ``metrics()`` reported; ``timings`` seconds per
    phase; ``env_steps`` the environment steps it took; ``policy_lag`` how many updates old the
    weights it acted with were (async policies); ``compiling`` the compiled regions it still builds
    (``msrl.rl.compiling``) and ``compiled`` those it switched to after this iteration, with the
    seconds their builds took (``msrl.rl.switch_compiled``).  An ``aborted`` report is of an
    iteration the replica gave up because the run was being torn down while it waited on a peer:
    it carries nothing, and merging it adds nothing."""

    fragment: str
    replica: int
    output: Any = None
    metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    env_steps: int = 0
    policy_lag: float = 0.0
    compiling: tuple[str, ...] = ()
    compiled: tuple[tuple[str, float], ...] = ()
    aborted: bool = False

    @property
    def episodes(self) -> float:
        """Episodes this replica's environments finished in the iteration (``metrics['episodes']``)."""
        return float(self.metrics.get("episodes", 0.0))

    def with_time_moved(self, source: str, target: str, seconds: float) -> ReplicaReport:
        """The report with ``seconds`` of phase ``source`` counted as ``target`` instead (a gradient
        all-reduce that ran inside ``learn()`` is communication, not learning)."""
        timings = dict(self.timings)
        timings[source] = timings.get(source, 0.0) - seconds
        timings[target] = timings.get(target, 0.0) + seconds
        return dataclasses.replace(self, timings=timings)


@dataclass
class IterationResult:
    """One iteration of a whole run: ``output`` is what ``train_step`` returned (from the
    fragment that holds the output node), ``component_metrics`` what the components'
    ``metrics()`` reported (merged over replicas), ``timings`` seconds per phase (env,
    inference, learn, buffer, communication; the slowest replica's) and ``env_steps``
    the environment steps taken by every replica together.  ``fragment_timings`` splits
    ``timings`` by fragment (fragment -> phase -> seconds, the slowest replica's) when
    the run has more than one fragment.  ``compiling`` names the compiled regions still being
    built anywhere in the run, ``compiled`` those switched to after this iteration (name ->
    seconds their build took, the longest over replicas)."""

    output: Any
    component_metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    env_steps: int = 0
    fragment_timings: dict[str, dict[str, float]] = field(default_factory=dict)
    compiling: tuple[str, ...] = ()
    compiled: dict[str, float] = field(default_factory=dict)


def merge_compiled(reports: list[ReplicaReport]) -> tuple[tuple[str, ...], dict[str, float]]:
    """The run's ``compiling`` and ``compiled`` from its replicas' reports."""
    compiling = tuple(sorted({name for report in reports for name in report.compiling}))
    compiled: dict[str, float] = {}
    for report in reports:
        for name, seconds in report.compiled:
            compiled[name] = max(compiled.get(name, 0.0), seconds)
    return compiling, compiled


class Runtime(Protocol):
    def run_iteration(self, more: bool = False) -> IterationResult:
        """``more``: another call follows with no ``state_dict``/``load_state_dict`` in between,
        so the runtime may start the next iteration early."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...
