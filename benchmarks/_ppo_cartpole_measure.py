"""Measurement for ``ppo_cartpole.py``: a training clock that pauses while evaluating, the
evaluation schedule both frameworks share, and the record of one framework's run with one seed."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


# -- measurement ------------------------------------------------------------------------------------
class Stopwatch:
    """A wall clock that can be paused, so evaluation does not count as training time."""

    def __init__(self) -> None:
        self._elapsed = 0.0
        self._started: float | None = None

    def start(self) -> None:
        if self._started is None:
            self._started = time.perf_counter()

    def stop(self) -> None:
        if self._started is not None:
            self._elapsed += time.perf_counter() - self._started
            self._started = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the clock for the duration of the block, then restore its running state."""
        was_running = self._started is not None
        self.stop()
        try:
            yield
        finally:
            if was_running:
                self.start()

    @property
    def seconds(self) -> float:
        running = time.perf_counter() - self._started if self._started is not None else 0.0
        return self._elapsed + running


@dataclass
class EvalPoint:
    env_steps: int
    train_seconds: float
    mean_return: float


@dataclass
class RunRecord:
    """What one framework achieved with one seed."""

    framework: str
    seed: int
    env_steps: int = 0
    train_seconds: float = 0.0
    curve: list[EvalPoint] = field(default_factory=list)
    num_envs: int = 0
    iterations: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    """Summed ``time_<phase>`` of the iterations (msrl only)."""

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.train_seconds if self.train_seconds > 0 else float("nan")

    def seconds_to(self, threshold: float) -> float | None:
        """Training seconds at the first evaluation whose greedy mean reached ``threshold``."""
        return next((p.train_seconds for p in self.curve if p.mean_return >= threshold), None)

    @property
    def final_return(self) -> float:
        return self.curve[-1].mean_return if self.curve else float("nan")


class EvalSchedule:
    """Evaluates whenever the env-step count crosses the next multiple of ``every``,
    with the clock paused, and appends the result to the record's curve."""

    def __init__(self, record: RunRecord, clock: Stopwatch, every: int, evaluate: Callable[[], list[float]]) -> None:
        self.record, self.clock, self.every, self.evaluate = record, clock, every, evaluate
        self.next_at = every

    def maybe_evaluate(self, env_steps: int, force: bool = False) -> None:
        if not force and env_steps < self.next_at:
            return
        with self.clock.paused():
            point = EvalPoint(env_steps, self.clock.seconds, statistics.fmean(self.evaluate()))
        self.record.curve.append(point)
        print(
            f"  {self.record.framework:>4} seed {self.record.seed}: {env_steps:>7,} steps  "
            f"{point.train_seconds:6.1f} s  greedy {point.mean_return:6.1f}",
            file=sys.stderr,
            flush=True,
        )
        while self.next_at <= env_steps:
            self.next_at += self.every
