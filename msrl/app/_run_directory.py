"""A run's directory and everything in it, behind one class: its name, its lock, ``config.yaml``,
``metrics.jsonl``, the TensorBoard event files and the checkpoint with its manifest.

Layout of ``<runs_dir>/<name>/``::

    .lock                       the process that holds the run (flock; its pid inside)
    config.yaml                 the config the run goes on with
    metrics.jsonl               one record per iteration
    events.out.tfevents.*       the same records for TensorBoard (``_tensorboard.py``)
    checkpoint.pt               verified checkpoint (``_checkpoint.py``)
    eval.json, placement.txt    the final evaluation; which node ran which replica (Ray runs)

The loop (``Trainer``) says what happened (an iteration's record, a checkpoint, a rewind to the
last checkpoint) and this class keeps the files consistent with it: a resume and a recovery from a
lost worker rewind the metrics and TensorBoard the same way, through one path (``rewind``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import yaml

from msrl.core import ConfigError, StorageError

if TYPE_CHECKING:  # torch and tensorboardX are imported by what writes a run, not by what reads its metrics
    from msrl.app._evaluate import Evaluation
    from msrl.app._tensorboard import ScalarLog

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.jsonl"
EVAL_NAME = "eval.json"
CONFIG_NAME = "config.yaml"
LOCK_NAME = ".lock"
PLACEMENT_NAME = "placement.txt"
PLAN_NAME = "plan.json"
"""Which node runs each fragment replica (runs on Ray), as printed at the start."""
MAX_SAME_NAME = 10_000
"""Most runs of one name in one ``runs_dir`` (``name``, ``name_2``, ...)."""


class Position(NamedTuple):
    """Where a run stands: its last finished iteration and the env steps trained up to it."""

    iteration: int
    env_steps: int


class RunDirectory:
    """One run's directory, held (locked) by this process from ``create``/``reopen`` to ``close``.

    Example::

        with RunDirectory.create("runs", "ppo_cartpole") as run_dir:
            run_dir.start(config.raw)
            run_dir.record({"iteration": 1, "env_steps": 2048, "episode_return": 21.5})
            run_dir.save_checkpoint({"config": config.raw, "iteration": 1, ...})
    """

    def __init__(self, path: str, lock: IO[str]) -> None:
        """Use ``create`` or ``reopen``: a ``RunDirectory`` always holds its directory's lock."""
        self.path = path
        self._lock: IO[str] | None = lock
        self._metrics: IO[str] | None = None
        self._scalars: ScalarLog | None = None

    @classmethod
    def create(cls, runs_dir: str, name: str) -> RunDirectory:
        """A new, locked ``runs_dir/name``, or ``name_2``... so an earlier run's results are never overwritten."""
        with writing(runs_dir, what="runs_dir"):
            os.makedirs(runs_dir, exist_ok=True)
        for suffix in range(1, MAX_SAME_NAME):
            path = os.path.join(runs_dir, name if suffix == 1 else f"{name}_{suffix}")
            try:
                with writing(path, what="the run directory"):
                    os.mkdir(path)
            except FileExistsError:
                continue
            return cls(path, _lock(path))
        raise ConfigError(f"too many runs named {name!r} in {runs_dir!r}; choose another name")

    @classmethod
    def reopen(cls, path: str | os.PathLike[str]) -> RunDirectory:
        """An existing run directory (a resume), locked; nothing in it changes before ``start``.
        Two resumes of one checkpoint would otherwise both run and leave one's checkpoint beside
        the other's metrics."""
        path = os.path.abspath(os.fspath(path))
        return cls(path, _lock(path))

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.path, CHECKPOINT_NAME)

    # -- the run's files ------------------------------------------------------------------------
    def start(self, config: Mapping[str, Any], resumed_at: Position | None = None) -> None:
        """Write ``config.yaml`` (on a resume too: the config the run goes on with) and open the
        metrics and TensorBoard logs; a resumed run's logs are first rewound to ``resumed_at``."""
        _write_atomically(os.path.join(self.path, CONFIG_NAME), yaml.safe_dump(dict(config), sort_keys=False))
        with writing(os.path.join(self.path, METRICS_NAME)):
            self._open_logs(resumed_at)

    def record(self, record: Mapping[str, Any]) -> None:
        """Append one iteration's record to ``metrics.jsonl`` and the event file, both flushed."""
        if self._metrics is None or self._scalars is None:
            raise RuntimeError("RunDirectory.record before start (or after close)")
        line = json.dumps(record) + "\n"
        with writing(os.path.join(self.path, METRICS_NAME), len(line.encode())):
            self._metrics.write(line)
            self._metrics.flush()
        with writing(self._scalars.path, len(line)):  # about as many bytes as the record's line
            self._scalars.write(record)

    def rewind(self, to: Position) -> None:
        """Go back to ``to`` (the last checkpoint, or the start), as a resume from there would: the
        records written after it are dropped, and TensorBoard hides the events logged after it."""
        self._close_logs()
        self._open_logs(to)

    def save_checkpoint(self, payload: dict[str, Any]) -> None:
        """Write ``checkpoint.pt`` atomically, with its manifest, once the records up to it are on
        disk: each record is flushed to the operating system as it comes, and made durable here,
        so a machine that goes down keeps every record the checkpoint resumes after."""
        from msrl.app._checkpoint import save_checkpoint

        if self._metrics is not None and self._scalars is not None:
            with writing(os.path.join(self.path, METRICS_NAME)):
                self._metrics.flush()
                os.fsync(self._metrics.fileno())
                self._scalars.sync()
        save_checkpoint(self.checkpoint_path, payload)

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The verified checkpoint, or None when the run has written none yet."""
        from msrl.app._checkpoint import load_checkpoint

        return load_checkpoint(self.checkpoint_path) if os.path.exists(self.checkpoint_path) else None

    def write_evaluation(self, evaluation: Evaluation) -> None:
        """Write ``eval.json``: the final greedy evaluation's returns and their mean."""
        data = {"episodes": evaluation.episodes, "returns": evaluation.returns, "mean": evaluation.mean}
        _write_atomically(os.path.join(self.path, EVAL_NAME), json.dumps(data, indent=1))

    def write_placement(self, lines: Sequence[str]) -> None:
        """Write ``placement.txt``: which node runs each fragment replica, one line each."""
        text = "\n".join(lines) + "\n"
        with writing(os.path.join(self.path, PLACEMENT_NAME), len(text)):
            with open(os.path.join(self.path, PLACEMENT_NAME), "w", encoding="utf-8") as handle:
                handle.write(text)

    def write_plan(self, plan: Mapping[str, Any]) -> None:
        """Write ``plan.json``: the ranking a ``policy: auto`` run chose its policy by."""
        _write_atomically(os.path.join(self.path, PLAN_NAME), json.dumps(plan, indent=1, sort_keys=True))

    def metrics(self) -> list[dict[str, Any]]:
        """Every record in ``metrics.jsonl`` (a cut-short last line left out)."""
        return read_metrics(self.path)

    def close(self) -> None:
        """Close the logs and release the lock; closing twice is harmless."""
        self._close_logs()
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    def _open_logs(self, rewound_to: Position | None) -> None:
        from msrl.app._tensorboard import ScalarLog

        metrics = os.path.join(self.path, METRICS_NAME)
        if rewound_to is not None:
            _truncate_metrics(metrics, rewound_to.iteration)
        self._metrics = open(metrics, "a", encoding="utf-8")
        # rewound: TensorBoard hides what the run logged after that point, from its next step on
        self._scalars = ScalarLog(self.path, purge_step=None if rewound_to is None else rewound_to.env_steps + 1)

    def _close_logs(self) -> None:
        """Close both logs. What a failed write left in a buffer cannot be written at close either:
        that write has already stopped the run with its ``StorageError``."""
        if self._metrics is not None:
            with contextlib.suppress(OSError):
                self._metrics.close()
            self._metrics = None
        if self._scalars is not None:
            with contextlib.suppress(OSError):
                self._scalars.close()
            self._scalars = None


def read_metrics(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The per-iteration records of a run directory's ``metrics.jsonl``."""
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip()]
    records = []
    for index, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if index < len(lines) - 1:  # only the last line may be cut short (an interrupted write)
                raise
    return records


def _lock(run_dir: str) -> IO[str]:
    """An exclusive lock on ``run_dir`` for this process (``flock``, released when the process ends
    however it ends), or a one-line error naming the process that holds it."""
    with writing(os.path.join(run_dir, LOCK_NAME)):
        handle = open(os.path.join(run_dir, LOCK_NAME), "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise ConfigError(
            f"run directory {run_dir!r} is in use by another msrl process (pid {holder}); "
            f"wait for it to finish, or resume a copy of the directory"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _record_iteration(line: str) -> int | None:
    """A metrics line's iteration, or None for a line an interrupted write left incomplete."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return int(record.get("iteration", 0)) if isinstance(record, dict) else None


def _truncate_metrics(path: str, iteration: int) -> None:
    """Drop records written after ``iteration``, so a resumed run does not repeat iterations, and a
    last line an interrupted write left incomplete."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            number = _record_iteration(line) if line.strip() else None
            if number is not None and number <= iteration:
                kept.append(line if line.endswith("\n") else line + "\n")
    _write_atomically(path, "".join(kept))


def _write_atomically(path: str, text: str) -> None:
    """Write beside ``path``, then rename: a crash mid-write leaves the old file or the new, never
    half; a directory that cannot take it is a ``StorageError`` (the temporary file removed)."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp")
    try:
        with writing(path, len(text.encode())):
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def writing(path: str, needed: int | None = None, what: str = "") -> Iterator[None]:
    """A write to the run's storage at ``path``: an ``OSError`` in it (a full disk, a read-only or
    vanished directory) becomes a one-line ``StorageError`` naming the path (as ``what``, where
    given) and the bytes it needed. ``FileExistsError`` passes: the callers that expect it handle it."""
    try:
        yield
    except FileExistsError:
        raise
    except OSError as exc:
        free = free_bytes(os.path.dirname(os.path.abspath(path)))
        raise StorageError(storage_message(f"{what} {path}" if what else path, exc, needed, free)) from exc


def free_bytes(directory: str) -> int | None:
    """Bytes free to this process on ``directory``'s file system (None where it cannot be read)."""
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def storage_message(what: str, exc: BaseException, needed: int | None, free: int | None) -> str:
    """One line for a write that failed: what, why, how many bytes it needed and how many are free."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "the write failed"
    if not isinstance(exc, OSError) and free is not None and needed is not None and free < needed:
        why = os.strerror(errno.ENOSPC)
    room = f"{free:,} bytes free there" if free is not None else "the free space cannot be read"
    need = f"it needs {needed:,} bytes; " if needed is not None else ""
    return f"cannot write {what}: {why} ({need}{room})"
