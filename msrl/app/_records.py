"""One iteration's metrics record (a line of ``metrics.jsonl``), built from what the runtime
returned, and the check that stops a run whose learner reported a non-finite loss."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fragments import IterationResult
from msrl.core import DivergenceError


def iteration_record(
    result: IterationResult,
    elapsed: float,
    agents_per_env: int,
    *,
    iteration: int,
    env_steps: int,
    restarts: int,
    lost_env_steps: int,
    replicas: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The record of iteration ``iteration``: the run's counters after it, its throughput, every
    component metric and learner output (numbers as floats, anything else as text), and the time
    split into phases, the slowest replica's overall and, with several fragments, each one's; and
    the replicas each elastic fragment (``replicas``) ran it with."""
    record: dict[str, Any] = {
        "iteration": iteration,
        "env_steps": env_steps,
        "agent_steps": env_steps * agents_per_env,
        "wall_time": elapsed,
        "steps_per_s": result.env_steps / elapsed if elapsed > 0 else 0.0,
        "restarts": restarts,
        "lost_env_steps": lost_env_steps,
    }
    record.update({f"replicas/{fragment}": count for fragment, count in (replicas or {}).items()})
    record.update({k: _number(v) for k, v in result.component_metrics.items()})
    if isinstance(result.output, dict):
        record.update({k: _number(v) for k, v in result.output.items()})
    phases = dict(result.timings)
    phases.setdefault("communication", 0.0)
    record.update({f"time_{phase}": seconds for phase, seconds in sorted(phases.items())})
    for fragment, split in sorted(result.fragment_timings.items()):  # several fragments: each one's split
        record.update({f"time_{phase}/{fragment}": seconds for phase, seconds in sorted(split.items())})
    if result.compiling:  # compiled regions still being built, in the background
        record["compiling"] = float(len(result.compiling))
    if result.compiled:  # switched to after this iteration: how long their builds took
        record["compile_seconds"] = max(result.compiled.values())
    return record


def check_losses(output: Any, iteration: int) -> None:
    """Stop at the first update whose reported loss is NaN or inf (every learner output named
    ``*loss*``), before its record or a checkpoint is written: with gradient clipping the weights may
    stay finite for a while, and the run would log nan to the end."""
    if not isinstance(output, dict):
        return
    for key, value in output.items():
        try:
            value = float(value)  # numbers, numpy and 0-d torch scalars
        except (TypeError, ValueError):
            continue
        if "loss" in key and not math.isfinite(value):
            raise DivergenceError(
                f"iteration {iteration}: the learner's update reported {key} = {value}; the run "
                f"stops here, its last checkpoint kept: lower algo.learning_rate or check the "
                f"rewards and observations"
            )


def _number(value: Any) -> float | str:
    """A metric as JSON holds it: a finite float, or its text (``"nan"``, ``"inf"``, a non-number)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else str(number)
