"""How the environment benchmarks time a step, written once so that msrl's rows
(``tag_scaling.py``) and WarpDrive's (``warpdrive.py``) count alike; standard library only,
so that WarpDrive's worker imports it without msrl."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def rate(
    step: Callable[[Any], Any], actions: list, num_envs: int, seconds: float, sync: Callable[[], None] = lambda: None
) -> float:
    """Median environment steps per second over windows of about ``seconds / 3`` (at least three);
    ``sync`` waits for a device's queued work before a clock is read.  The first step is a warm-up
    that also sizes the windows."""
    start = time.perf_counter()
    step(actions[0])
    sync()
    per_step = max(time.perf_counter() - start, 1e-6)
    window = max(1, min(len(actions), int(seconds / 3 / per_step)))
    rates: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rates) < 3:
        start = time.perf_counter()
        for action in actions[:window]:
            step(action)
        sync()
        rates.append(window * num_envs / (time.perf_counter() - start))
    return statistics.median(rates)
