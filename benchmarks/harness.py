"""The benchmarks' shared harness, written once: how a rate or a call is timed, how variants are
interleaved so that a machine whose speed drifts hits each alike, the machine and versions a
figure was taken on, JSONL records and markdown tables.

Standard library only at import: WarpDrive's worker (``benchmarks.warpdrive``) imports it where
neither msrl nor its dependencies need to be importable."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "benchmarks" / "figures"
"""Recorded data and the figures drawn from it, each named for what it holds."""


# -- timing -------------------------------------------------------------------------------------------
def rate(
    step: Callable[[Any], Any],
    actions: Sequence[Any],
    num_envs: int,
    seconds: float,
    sync: Callable[[], None] = lambda: None,
) -> float:
    """Median environment steps per second over windows of about ``seconds / 3`` (at least three);
    ``sync`` waits for a device's queued work before a clock is read.  The first step is a warm-up
    that also sizes the windows.  Every environment benchmark counts a step this way, msrl's rows
    and their peers' (WarpDrive's, EnvPool's, gymnasium's) alike."""
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


def timed(call: Callable[[], object], rounds: int) -> list[float]:
    """Seconds of each of ``rounds`` calls, after ``rounds // 10`` untimed warm-up calls."""
    for _ in range(rounds // 10):
        call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


RAY_SETTLE_S = 20.0


def start_ray(num_cpus: int = 2) -> None:
    """A local Ray for a peer that runs on Ray (RLlib), listening on 127.0.0.1 only and without a
    dashboard (msrl's own ``cluster.connect``), unless this process is connected already.  It stays
    up for the next runs, offering ``num_cpus`` logical CPUs."""
    import ray

    from cluster import connect

    if ray.is_initialized():
        return
    connect(num_cpus=num_cpus)
    # Ray prestarts its idle workers (each imports its runtime, seconds of CPU): let that finish
    # before the first timed run, which would otherwise share the cores with it.
    time.sleep(RAY_SETTLE_S)


def per_call(call: Callable[[], object], calls: int) -> float:
    """Mean seconds per call over ``calls`` calls timed together (calls too short to time one by one)."""
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def median_p90(times: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.9)]


class Stopwatch:
    """A wall clock that can be paused, so that evaluation does not count as training time."""

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


# -- interleaving -------------------------------------------------------------------------------------
def interleave(variants: Mapping[str, Callable[[], T]], rounds: int, alternate: bool = True) -> dict[str, list[T]]:
    """Each variant's results over ``rounds`` rounds, every round running each variant once, in
    turn (with ``alternate``, in reverse order every other round: A B, B A, ...).  This VM's speed
    drifts 10-50% within minutes, so figures taken minutes apart compare nothing; taken in
    alternation, a slow spell reaches every variant alike."""
    results: dict[str, list[T]] = {name: [] for name in variants}
    for round_ in range(rounds):
        for name in in_turn(list(variants), round_, alternate):
            results[name].append(variants[name]())
    return results


def in_turn(names: Sequence[str], round_: int, alternate: bool = True) -> list[str]:
    """The order of round ``round_`` of ``interleave``: as given, reversed every other round with ``alternate``."""
    return list(reversed(names)) if alternate and round_ % 2 else list(names)


# -- the machine --------------------------------------------------------------------------------------
def versions(names: Iterable[str]) -> dict[str, str | None]:
    """The installed version of each distribution (None where it is not installed)."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine_info(packages: Iterable[str] = ("torch", "numpy", "gymnasium"), note: str = "") -> str:
    """One line: the platform, the processor, the CPUs (and how many this process may use), Python
    and each installed package of ``packages`` with its version, then ``note``."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    installed = [f"{name} {version}" for name, version in versions(packages).items() if version]
    line = (
        f"{platform.platform()}, {platform.processor() or platform.machine()}, cpu_count {os.cpu_count()} "
        f"({usable} usable); python {platform.python_version()}, {', '.join(installed)}"
    )
    return f"{line}; {note}" if note else line


def command_line(module: str, argv: Sequence[str] | None = None) -> str:
    """The command that ran benchmark ``module`` with ``argv`` (this process's arguments when None),
    as a user types it: ``python -m benchmarks.NAME ...``."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


# -- records ------------------------------------------------------------------------------------------
def append_jsonl(path: str | os.PathLike[str], record: Mapping[str, Any]) -> None:
    """Append one record as a line of ``path``: a run stopped part way keeps what it finished."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def read_jsonl(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Every record of every file, in order (blank lines skipped)."""
    return [json.loads(line) for path in paths for line in Path(path).read_text().splitlines() if line.strip()]


# -- markdown -----------------------------------------------------------------------------------------
def table_head(header: Sequence[str], align: str = "") -> str:
    """A markdown table's two header lines; ``align`` holds one letter per column, ``l`` or ``r``
    (a first column of labels left, the rest right, when empty)."""
    align = align or "l" + "r" * (len(header) - 1)
    return table_row(header) + "\n|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"


def table_row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def markdown_table(header: Sequence[str], rows: Iterable[Iterable[Any]], align: str = "") -> str:
    return "\n".join([table_head(header, align), *(table_row(row) for row in rows)])
