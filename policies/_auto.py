"""``policy: auto``: the request to have the policy chosen for the run, and the presets (with
their replica counts) it chooses among.

``policy: auto`` or ``policy: {preset: auto, allow_async: true, max_replicas: 8}`` in a config.
The choice itself (calibrate, predict, rank) is the application's; this module only says what
may be chosen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from msrl.core import ConfigError, build_dataclass

AUTO = "auto"
ASYNC_PRESETS = frozenset({"async_single_learner"})
"""Presets that change what is learned (the actors act with weights an update old): candidates
only where the config allows them."""


@dataclass
class AutoParams:
    """What ``policy: auto`` may choose."""

    allow_async: bool = False
    """Also consider ``async_single_learner``, whose actors act with weights up to one update old
    (the same config then learns differently)."""
    max_replicas: int = 0
    """Most replicas of a fragment to consider; 0 = as many as the cluster has CPUs."""


def auto_params(spec: Any) -> AutoParams | None:
    """The ``AutoParams`` of a ``policy`` entry that asks for ``auto``, None for any other entry."""
    if spec == AUTO:
        return AutoParams()
    if not isinstance(spec, dict) or spec.get("preset") != AUTO:
        return None
    values = {k: v for k, v in spec.items() if k != "preset"}
    names = ("allow_async", "max_replicas")
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"unknown parameter {unknown[0]!r} for policy 'auto'; valid choices: {', '.join(names)}")
    params = build_dataclass(AutoParams, values, "policy.")
    if params.max_replicas < 0:
        raise ConfigError(f"policy.max_replicas must be >= 0, got {params.max_replicas}")
    return params


def candidates(params: AutoParams, cpus: float, gpus: float = 0.0) -> list[dict[str, Any]]:
    """The policy entries ``auto`` ranks on a cluster of ``cpus`` CPUs (and ``gpus`` GPUs) in all:
    ``local`` and every Ray preset at each replica count from 2 up to the CPUs (or
    ``max_replicas``), powers of two and the CPU count itself; ``gpu_only`` where there is a GPU;
    ``async_single_learner`` where ``allow_async``."""
    most = int(cpus) if params.max_replicas == 0 else min(int(cpus), params.max_replicas)
    counts = sorted({n for n in (2, 4, 8, 16, 32, 64, 128, 256, most) if 2 <= n <= max(2, most)})
    found: list[dict[str, Any]] = [{"preset": "local"}]
    for count in counts:
        found.append({"preset": "single_learner_coarse", "actors": count})
        found.append({"preset": "single_learner_fine", "envs": count})
        found.append({"preset": "multi_learner", "learners": count})
        if params.allow_async:
            found.append({"preset": "async_single_learner", "actors": count})
    if gpus >= 1:
        found.append({"preset": "gpu_only"})
    return found


def label(spec: dict[str, Any]) -> str:
    """A candidate's name in a plan: the preset and its replica count (``multi_learner x4``)."""
    counts = [v for k, v in spec.items() if k in ("actors", "envs", "learners")]
    return spec["preset"] + (f" x{counts[0]}" if counts else "")
