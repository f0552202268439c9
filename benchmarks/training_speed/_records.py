"""What ``benchmarks.training_speed`` records and reports: the evaluation schedule every framework
shares (on a training clock that pauses while evaluating), the record of one framework's run with
one seed (its greedy evaluations and its training episodes, for the 100-episode mean return), and
the markdown tables made of the records."""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from benchmarks.harness import Stopwatch


# -- measurement ------------------------------------------------------------------------------------
@dataclass
class EvalPoint:
    env_steps: int
    train_seconds: float
    mean_return: float


@dataclass
class EpisodeBatch:
    """``count`` training episodes that ended by ``env_steps`` (``train_seconds`` on the clock), with
    mean return ``mean_return``: one per episode, or (msrl) one per iteration."""

    env_steps: int
    train_seconds: float
    mean_return: float
    count: int = 1


WINDOW = 100
"""Training episodes in the rolling mean that the "100-episode mean" columns compare with the threshold."""


def rolling_means(batches: Sequence[EpisodeBatch], window: int = WINDOW) -> Iterator[tuple[EpisodeBatch, float]]:
    """After each batch once ``window`` episodes have ended: the batch and the mean return of the
    last ``window`` episodes, a batch counting as ``count`` episodes of its mean return (the oldest
    batch in the window only in part)."""
    recent: list[EpisodeBatch] = []
    total, weighted = 0, 0.0
    for batch in batches:
        recent.append(batch)
        total, weighted = total + batch.count, weighted + batch.mean_return * batch.count
        while total - recent[0].count >= window:
            oldest = recent.pop(0)
            total, weighted = total - oldest.count, weighted - oldest.mean_return * oldest.count
        if total >= window:
            yield batch, (weighted - recent[0].mean_return * (total - window)) / window


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
    episodes: list[EpisodeBatch] = field(default_factory=list)
    """Training episodes in the order they ended."""
    first: tuple[int, float, dict[str, float]] = (0, 0.0, {})
    """Env steps, training seconds and phase seconds after the first iteration, which builds the
    compiled regions (device mode): what follows it is the steady state."""

    def steady(self) -> tuple[float, dict[str, float]]:
        """Env steps/s and seconds per iteration of each phase, the first iteration left out."""
        steps, seconds, phases = self.first
        n = self.iterations - 1
        if n <= 0 or self.train_seconds <= seconds:
            return float("nan"), {}
        rate = (self.env_steps - steps) / (self.train_seconds - seconds)
        return rate, {p: (v - phases.get(p, 0.0)) / n for p, v in self.phase_seconds.items()}

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.train_seconds if self.train_seconds > 0 else float("nan")

    def seconds_to(self, threshold: float) -> float | None:
        """Training seconds at the first evaluation whose greedy mean reached ``threshold``."""
        return next((p.train_seconds for p in self.curve if p.mean_return >= threshold), None)

    def add_episodes(self, env_steps: int, train_seconds: float, returns: Sequence[float]) -> None:
        """Training episodes that ended by ``env_steps`` (none is fine)."""
        if returns:
            self.episodes.append(EpisodeBatch(env_steps, train_seconds, statistics.fmean(returns), len(returns)))

    def seconds_to_mean(self, threshold: float, window: int = WINDOW) -> float | None:
        """Training seconds when the mean return of the last ``window`` training episodes first
        reached ``threshold``."""
        return next((b.train_seconds for b, mean in rolling_means(self.episodes, window) if mean >= threshold), None)

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
            f"  {self.record.framework:>5} seed {self.record.seed}: {env_steps:>7,} steps  "
            f"{point.train_seconds:6.1f} s  greedy {point.mean_return:6.1f}",
            file=sys.stderr,
            flush=True,
        )
        while self.next_at <= env_steps:
            self.next_at += self.every

    def finish(self) -> None:
        """Freeze the training time and make sure the curve ends with the final policy."""
        self.clock.stop()
        if not self.record.curve or self.record.curve[-1].env_steps != self.record.env_steps:
            self.maybe_evaluate(self.record.env_steps, force=True)
        self.record.train_seconds = self.clock.seconds


# -- report -----------------------------------------------------------------------------------------
def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f}"


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0 or not math.isfinite(numerator / denominator):
        return None
    return numerator / denominator


def _times(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def peer_ratios(msrl: RunRecord, peer: RunRecord, threshold: float) -> tuple[float | None, ...]:
    """msrl's env steps/s over the peer's, and how many times sooner msrl reached the threshold
    (the peer's seconds over msrl's): greedy, then the 100-episode training mean."""
    return (
        _ratio(msrl.steps_per_second, peer.steps_per_second),
        _ratio(peer.seconds_to(threshold), msrl.seconds_to(threshold)),
        _ratio(peer.seconds_to_mean(threshold), msrl.seconds_to_mean(threshold)),
    )


def _peers(records: Sequence[RunRecord]) -> list[str]:
    return list(dict.fromkeys(r.framework for r in records if r.framework != "msrl"))


def markdown_table(records: Sequence[RunRecord], threshold: float) -> str:
    """One row per framework and seed; msrl rows carry their ratios to each peer with the same seed."""
    peers, by_seed = _peers(records), {(r.framework, r.seed): r for r in records}
    ratio_heads = "".join(f"| steps/s msrl/{p} | sooner greedy {p}/msrl | sooner mean {p}/msrl " for p in peers)
    lines = [
        f"| framework | seed | env steps | env steps/s | wall s to greedy >= {threshold:g} "
        f"| wall s to {WINDOW}-episode mean >= {threshold:g} | final greedy return {ratio_heads}|",
        "|---|---:|---:|---:|---:|---:|---:|" + "---:|---:|---:|" * len(peers),
    ]
    for r in records:
        cells: list[str] = []
        for p in peers:
            other = by_seed.get((p, r.seed)) if r.framework == "msrl" else None
            cells += [_times(x) for x in peer_ratios(r, other, threshold)] if other else ["", "", ""]
        lines.append(
            f"| {r.framework} | {r.seed} | {r.env_steps:,} | {r.steps_per_second:,.0f} | "
            f"{_seconds(r.seconds_to(threshold))} | {_seconds(r.seconds_to_mean(threshold))} | "
            f"{r.final_return:.1f} |" + "".join(f" {c} |" for c in cells)
        )
    return "\n".join(lines)


def ratio_summary(records: Sequence[RunRecord], threshold: float) -> list[str]:
    """Per peer, each ratio's lowest and highest over the seeds (the targets hold "on every seed")."""
    names = ("env steps/s", f"sooner to greedy >= {threshold:g}", f"sooner to {WINDOW}-episode mean >= {threshold:g}")
    msrl = {r.seed: r for r in records if r.framework == "msrl"}
    lines = []
    for peer in _peers(records):
        pairs = [(msrl[r.seed], r) for r in records if r.framework == peer and r.seed in msrl]
        ranges = []
        for name, column in zip(names, zip(*(peer_ratios(m, p, threshold) for m, p in pairs))):
            known = [x for x in column if x is not None]
            missing = f" ({len(column) - len(known)} n/a)" if len(known) < len(column) else ""
            span = f"{min(known):.2f}-{max(known):.2f}x" if known else "n/a"
            ranges.append(f"{name} {span}{missing}")
        lines.append(f"msrl / {peer} over {len(pairs)} seeds: " + "; ".join(ranges))
    return lines


PROFILE_PHASES = ("env", "inference", "buffer", "learn", "communication")
"""msrl's phases, as its iteration records time them (communication: sending, receiving and
waiting between fragments, zero under ``local``)."""


def profile_table(records: Sequence[RunRecord]) -> str:
    """Where each msrl run's training seconds went: its phases summed over the run's iterations
    (under a distributed policy, over its fragments, so they can pass the wall time)."""
    lines = [
        "| msrl seed | training s | " + " | ".join(f"{p} s" for p in PROFILE_PHASES) + " |",
        "|---:|---:|" + "---:|" * len(PROFILE_PHASES),
    ]
    for r in records:
        if r.framework == "msrl":
            phases = " | ".join(f"{r.phase_seconds.get(p, 0.0):.2f}" for p in PROFILE_PHASES)
            lines.append(f"| {r.seed} | {r.train_seconds:.2f} | {phases} |")
    return "\n".join(lines)


def device_table(records: Sequence[RunRecord], threshold: float) -> str:
    """Device mode: one row per number of environments and seed, with the time split per iteration."""
    phases = PROFILE_PHASES
    lines = [
        "| num_envs | seed | env steps | env steps/s | s/iter | "
        + " | ".join(f"{p} s/iter" for p in phases)
        + f" | s to greedy >= {threshold:g} | final greedy return |",
        "|---:|---:|---:|---:|---:|" + "---:|" * len(phases) + "---:|---:|",
    ]
    for r in records:

        def per(seconds: float, r: RunRecord = r) -> str:
            return f"{seconds / r.iterations:.4f}" if r.iterations else "n/a"

        lines.append(
            f"| {r.num_envs:,} | {r.seed} | {r.env_steps:,} | {r.steps_per_second:,.0f} | "
            f"{per(r.train_seconds)} | "
            + " | ".join(per(r.phase_seconds.get(p, 0.0)) for p in phases)
            + f" | {_seconds(r.seconds_to(threshold))} | {r.final_return:.1f} |"
        )
    lines += [
        "",
        "The same runs without their first iteration (which builds the compiled regions: "
        f"{', '.join(f'{r.first[1]:.1f} s' for r in records)}):",
        "",
        "| num_envs | seed | env steps/s | "
        + " | ".join(f"{p} s/iter" for p in phases)
        + f" | s to greedy >= {threshold:g} |",
        "|---:|---:|---:|" + "---:|" * len(phases) + "---:|",
    ]
    for r in records:
        rate, steady = r.steady()
        reached = r.seconds_to(threshold)
        lines.append(
            f"| {r.num_envs:,} | {r.seed} | {rate:,.0f} | "
            + " | ".join(f"{steady.get(p, 0.0):.4f}" for p in phases)
            + f" | {_seconds(None if reached is None else reached - r.first[1])} |"
        )
    return "\n".join(lines)
