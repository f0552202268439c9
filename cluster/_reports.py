"""Merging what the replicas report for one iteration (``fragments.ReplicaReport``) into the
one ``IterationResult`` the run loop sees.  Pure functions: tested without Ray."""

from __future__ import annotations

import math
from typing import Any

from fragments import IterationResult, ReplicaReport, merge_compiled

PER_EPISODE = ("episode_return", "episode_length")


def merge_reports(reports: list[ReplicaReport], per_fragment_timings: bool) -> IterationResult:
    """The run's iteration from its replicas' reports: the output (from the replica holding the
    output node), every phase's time (the slowest replica's; per fragment too when
    ``per_fragment_timings``), merged metrics and the env steps of all.  An aborted report (an
    iteration torn down while it waited on a peer) carries nothing and adds nothing."""
    reports = [report for report in reports if not report.aborted]
    output = next((r.output for r in reports if r.output is not None), None)
    timings: dict[str, float] = {}
    per_fragment: dict[str, dict[str, float]] = {}
    for report in reports:
        mine = per_fragment.setdefault(report.fragment, {})
        for phase, seconds in report.timings.items():
            timings[phase] = max(timings.get(phase, 0.0), seconds)
            mine[phase] = max(mine.get(phase, 0.0), seconds)
    compiling, compiled = merge_compiled(reports)
    return IterationResult(
        output=output,
        component_metrics=merge_replica_metrics([r.metrics for r in reports]),
        timings=timings,
        fragment_timings=per_fragment if per_fragment_timings else {},
        env_steps=sum(r.env_steps for r in reports),
        compiling=compiling,
        compiled=compiled,
    )


def merge_replica_metrics(per_replica: list[dict[str, Any]]) -> dict[str, float]:
    """One value per metric from the replicas' component metrics.

    Per-episode means are weighted by the number of episodes each replica finished
    and ``episodes`` is their total, so the result equals what one process stepping
    all the environments would report.  Other metrics (losses) are plain means.
    Non-finite and non-numeric values are dropped."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    for metrics in per_replica:
        count = metrics.get("episodes")
        for key, value in metrics.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            weight = float(count) if key in PER_EPISODE and isinstance(count, (int, float)) else 1.0
            sums[key] = sums.get(key, 0.0) + weight * float(value)
            weights[key] = weights.get(key, 0.0) + weight
    merged = {key: sums[key] / weights[key] for key in sums if weights[key] > 0}
    if "episodes" in sums:
        merged["episodes"] = sums["episodes"]
    return merged
