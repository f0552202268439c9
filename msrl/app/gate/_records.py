"""A training run as the gate reads it (and benchmarks that compare msrl with other frameworks): the
final greedy returns and the training episodes in the order they ended, from which follow the rolling
mean of the last ``WINDOW`` episodes, where it first reached a threshold, and its average over the
run."""

from __future__ import annotations

import io
import math
import os
import statistics
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from msrl.app._run import Run, train

WINDOW = 10
"""Training episodes in the rolling mean that is compared with the threshold."""


@dataclass
class EpisodeBatch:
    """Training episodes that ended at one point: ``count`` episodes with mean return ``mean_return``
    (one per episode, or msrl's one per iteration), with the env steps and wall seconds so far."""

    env_steps: int
    wall_seconds: float
    mean_return: float
    count: int = 1


@dataclass
class CurvePoint:
    env_steps: int
    wall_seconds: float
    rolling_return: float
    """Mean return of the last ``WINDOW`` training episodes (of all so far, before there are that many)."""
    episodes_seen: int


@dataclass
class TrainingRecord:
    """What one framework did with one seed on one config."""

    config: str
    framework: str
    seed: int
    env_steps: int
    wall_seconds: float
    eval_returns: list[float]
    episodes: list[EpisodeBatch] = field(default_factory=list)

    @property
    def final_return(self) -> float:
        return statistics.fmean(self.eval_returns) if self.eval_returns else float("nan")

    def curve(self) -> list[CurvePoint]:
        """The rolling mean of the last ``WINDOW`` training episodes after each batch, a batch counting
        as ``count`` episodes of its mean return (the oldest batch in the window only in part)."""
        points: list[CurvePoint] = []
        recent: deque[tuple[float, int]] = deque()
        total = seen = 0
        for batch in self.episodes:
            recent.append((batch.mean_return, batch.count))
            total += batch.count
            seen += batch.count
            while total - recent[0][1] >= WINDOW:
                total -= recent.popleft()[1]
            need, taken, acc = min(WINDOW, total), 0, 0.0
            for value, count in reversed(recent):
                k = min(count, need - taken)
                acc, taken = acc + value * k, taken + k
                if taken >= need:
                    break
            points.append(CurvePoint(batch.env_steps, batch.wall_seconds, acc / taken, seen))
        return points

    def reached(self, threshold: float) -> CurvePoint | None:
        """The first point whose full window of ``WINDOW`` episodes averages at least ``threshold``."""
        return next((p for p in self.curve() if p.episodes_seen >= WINDOW and p.rolling_return >= threshold), None)

    def training_return(self) -> float:
        """The learning curve averaged over the run's env steps: each rolling mean weighted by the env
        steps until the next (0 before the first episode ends).  Smoother than the steps to the
        threshold: it moves with the whole curve."""
        total, previous, value = 0.0, 0, 0.0
        for point in self.curve():
            total += value * (point.env_steps - previous)
            previous, value = point.env_steps, point.rolling_return
        total += value * max(0, self.env_steps - previous)
        return total / self.env_steps if self.env_steps else float("nan")


def record_of(run: Run, config: str, seed: int) -> TrainingRecord:
    """An msrl run's record: its final evaluation's returns and, from its per-iteration metrics, one
    batch per iteration that ended episodes (``episode_return`` over ``episodes`` of them), with the
    iterations' ``wall_time`` summed into wall seconds so far."""
    returns = [float(r) for r in run.evaluation.returns] if run.evaluation is not None else []
    record = TrainingRecord(config, "msrl", seed, int(run.env_steps), float(run.wall_time), returns)
    wall = 0.0
    for metrics in run.metrics:
        wall += float(metrics["wall_time"])
        value = metrics.get("episode_return")
        if isinstance(value, (int, float)) and math.isfinite(value):
            count = metrics.get("episodes", 1)
            count = int(count) if isinstance(count, (int, float)) and count >= 1 else 1
            record.episodes.append(EpisodeBatch(int(metrics["env_steps"]), wall, float(value), count))
    return record


def train_and_record(
    config: str | os.PathLike[str],
    seed: int,
    budget: int,
    eval_episodes: int,
    runs_dir: str | os.PathLike[str],
    overrides: Sequence[str] = (),
) -> tuple[TrainingRecord, Run]:
    """``msrl.train`` as a user calls it, ``overrides`` first and then the run's own (seed, budget,
    run directory, final evaluation; no progress bar, no checkpoints while training).  Its output is
    kept and shown only if the run fails."""
    stream = io.StringIO()
    own = [
        f"seed={seed}",
        f"total_env_steps={budget}",
        f"runs_dir={os.fspath(runs_dir)}",
        f"eval_episodes={eval_episodes}",
        "progress=false",
        "checkpoint_every=0",
    ]
    try:
        run = train(config, [*overrides, *own], stream=stream)
    except BaseException:
        sys.stderr.write(stream.getvalue()[-4000:])
        raise
    return record_of(run, os.path.splitext(os.path.basename(os.fspath(config)))[0], seed), run
