"""Training runs: ``Trainer`` drives one iteration at a time (metrics, progress,
checkpoints), and ``train`` runs it to the end and evaluates the result.

Everything that can be wrong with the input (config, policy, checkpoint) is
checked before the run directory is created, so a bad command writes nothing.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from msrl.app._checkpoint import load_checkpoint, save_checkpoint
from msrl.app._config import LoadedConfig, load_config
from msrl.app._evaluate import Evaluation, evaluate_algorithm
from msrl.app._load import load_components
from msrl.app._plan import make_runtime, plan
from msrl.app._tensorboard import ScalarLog
from msrl.core import CheckpointError, ConfigError, DivergenceError, EnvError, WorkerLostError

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.jsonl"
EVAL_NAME = "eval.json"
PLACEMENT_NAME = "placement.txt"
"""Which node runs each fragment replica (runs on Ray), as printed at the start."""
EVAL_SEED_OFFSET = 7919
"""The final evaluation's environments are seeded ``seed + EVAL_SEED_OFFSET``, apart from training's."""


@dataclass
class Run:
    """What ``msrl.train`` returns: where the results are and what they say.

    ``metrics`` holds one record per iteration (what ``metrics.jsonl`` holds, earlier
    iterations of a resumed run included); ``evaluation`` the final greedy
    evaluation, or None when ``eval_episodes`` is 0."""

    run_dir: str
    metrics: list[dict[str, Any]]
    evaluation: Evaluation | None
    iterations: int
    env_steps: int
    wall_time: float

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.run_dir, CHECKPOINT_NAME)


def read_config(
    config: str | os.PathLike | Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
    resume: str | os.PathLike | None = None,
) -> tuple[LoadedConfig, dict[str, Any] | None]:
    """The checked config of a run (from a file, a mapping, or a checkpoint to resume) and the checkpoint."""
    checkpoint = load_checkpoint(str(resume)) if resume is not None else None
    if checkpoint is not None:
        return load_config(None, overrides, base=checkpoint["config"]), checkpoint
    if config is None:
        raise ConfigError("train needs a CONFIG file or --resume CHECKPOINT")
    if isinstance(config, Mapping):
        return load_config(None, overrides, base=dict(config)), None
    if not isinstance(config, (str, os.PathLike)):
        raise ConfigError(f"config must be a YAML file path or a mapping, got {type(config).__name__}")
    return load_config(os.fspath(config), overrides), None


class Trainer:
    """A training run, one iteration at a time; ``msrl.train`` drives one to the end.

    Example::

        with Trainer("configs/ppo_cartpole.yaml", ["total_env_steps=20000"]) as trainer:
            while not trainer.done:
                record = trainer.step()          # one iteration: a metrics.jsonl record
            print(trainer.evaluate(episodes=10))
    """

    def __init__(
        self,
        config: str | os.PathLike | Mapping[str, Any] | None,
        overrides: Sequence[str] = (),
        *,
        resume: str | os.PathLike | None = None,
        address: str | None = None,
        stream: TextIO = sys.stderr,
    ) -> None:
        self.config, checkpoint = read_config(config, overrides, resume)
        self.plan = plan(self.config)
        if checkpoint is not None:
            _check_complete(checkpoint, self.config, list(self.plan.fdg.graph.components))
        self.stream, self.address = stream, address
        # a resumed run's directory is locked before anything starts: two resumes of one checkpoint
        # would otherwise both run and leave one's checkpoint beside the other's metrics
        self.lock = _lock_run_dir(os.path.dirname(os.path.abspath(resume))) if checkpoint is not None else None
        try:
            self.runtime = self._make_runtime()
        except BaseException:
            _unlock(self.lock)
            raise
        try:
            self.iteration = self.env_steps = 0
            self.restarts = self.lost_env_steps = 0  # recoveries from lost workers, over the whole run
            if checkpoint is not None:
                _restore(self.runtime, checkpoint, self.config)
                self.iteration, self.env_steps = int(checkpoint["iteration"]), int(checkpoint["env_steps"])
                self.restarts = int(checkpoint.get("restarts", 0))
                self.lost_env_steps = int(checkpoint.get("lost_env_steps", 0))
                self.run_dir = os.path.dirname(os.path.abspath(resume))
                _truncate_metrics(os.path.join(self.run_dir, METRICS_NAME), self.iteration)
            else:
                self.run_dir = _new_run_dir(self.config.run.runs_dir, self.config.run.name)
                self.lock = _lock_run_dir(self.run_dir)
            _write_config(self.run_dir, self.config.raw)  # on resume too: the config the run goes on with
            # resumed: TensorBoard hides what the interrupted run logged after the checkpoint
            self.scalars = ScalarLog(self.run_dir, purge_step=self.env_steps + 1 if checkpoint is not None else None)
        except BaseException:
            self.runtime.close()
            _unlock(self.lock)
            raise
        self.metrics_file = open(os.path.join(self.run_dir, METRICS_NAME), "a", encoding="utf-8")
        self.last_return = float("nan")
        self.steps_per_iteration = 0  # known after the first iteration
        self.wall_time = 0.0

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def done(self) -> bool:
        """Whether the run's env-step budget is spent."""
        return self.env_steps >= self.config.run.total_env_steps

    def step(self) -> dict[str, Any]:
        """Run one iteration; write and return its metrics record, and checkpoint when one is due.

        A fragment worker lost meanwhile (``WorkerLostError``) sends the run back to its last
        checkpoint on fresh workers, ``max_restarts`` times at most; the record returned is then
        that of the first iteration after the checkpoint."""
        return self._recovering(self._step)

    def _step(self) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            result = self.runtime.run_iteration(more=self._another_follows())
        except (DivergenceError, EnvError) as exc:  # where it happened, and in which iteration of the run
            raise type(exc)(f"iteration {self.iteration + 1}: {exc}") from exc
        _check_losses(result.output, self.iteration + 1)
        elapsed = time.perf_counter() - start
        self.iteration += 1
        self.env_steps += result.env_steps
        self.steps_per_iteration = result.env_steps
        if "episode_return" in result.component_metrics:
            self.last_return = result.component_metrics["episode_return"]
        record: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "agent_steps": self.env_steps * self.plan.agents_per_env,
            "wall_time": elapsed,
            "steps_per_s": result.env_steps / elapsed if elapsed > 0 else 0.0,
            "restarts": self.restarts,
            "lost_env_steps": self.lost_env_steps,
        }
        record.update({k: _number(v) for k, v in result.component_metrics.items()})
        if isinstance(result.output, dict):
            record.update({k: _number(v) for k, v in result.output.items()})
        phases = dict(result.timings)
        phases.setdefault("communication", 0.0)
        record.update({f"time_{phase}": seconds for phase, seconds in sorted(phases.items())})
        for fragment, split in sorted(result.fragment_timings.items()):  # several fragments: each one's split
            record.update({f"time_{phase}/{fragment}": seconds for phase, seconds in sorted(split.items())})
        self.metrics_file.write(json.dumps(record) + "\n")
        self.metrics_file.flush()
        self.scalars.write(record)
        every = self.config.run.checkpoint_every
        if every and self.iteration % every == 0:
            self.save()
        self.wall_time += time.perf_counter() - start
        return record

    def run(self) -> None:
        """Iterate until the budget is spent, with a progress bar; then checkpoint."""
        bar = _progress_bar(self.config.run, self.env_steps, self.stream)
        try:
            while True:
                while not self.done:
                    record = self.step()
                    if bar is not None:
                        bar.update(min(record["env_steps"], bar.total) - bar.n)
                        bar.set_postfix_str(f"return {self.last_return:7.1f}  {record['steps_per_s']:,.0f} steps/s")
                try:
                    self.save()
                    break
                except WorkerLostError as exc:  # back to the last checkpoint: train from there again
                    self._recover(exc)
        finally:
            if bar is not None:
                bar.close()

    def _another_follows(self) -> bool:
        """Whether the iteration about to run will be followed by another with no checkpoint
        in between (the runtime may then start that one early)."""
        every = self.config.run.checkpoint_every
        if not self.steps_per_iteration or (every and (self.iteration + 1) % every == 0):
            return False
        return self.env_steps + self.steps_per_iteration < self.config.run.total_env_steps

    def save(self) -> None:
        """Write the checkpoint (atomically): config, counters and every component's state."""
        save_checkpoint(
            os.path.join(self.run_dir, CHECKPOINT_NAME),
            {
                "config": self.config.raw,
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                "restarts": self.restarts,
                "lost_env_steps": self.lost_env_steps,
                "components": self.runtime.state_dict(),
            },
        )

    # -- recovery from lost workers ------------------------------------------------------------------
    def _make_runtime(self) -> Any:
        return make_runtime(self.plan, self.address)

    def _recovering(self, action: Any) -> Any:
        """``action()``, going back to the last checkpoint on fresh workers each time a worker is lost."""
        while True:
            try:
                return action()
            except WorkerLostError as exc:
                self._recover(exc)

    def _recover(self, lost: WorkerLostError) -> None:
        """Replace every worker and go back to the last checkpoint (or the start): the run goes on
        exactly as a resume from that checkpoint would, its metrics rewound to it, and the steps
        trained since are counted in ``lost_env_steps``.  Every replica is replaced, not just the
        lost one: the others may be half-way through an iteration that waits on it."""
        limit = self.config.run.max_restarts
        path = os.path.join(self.run_dir, CHECKPOINT_NAME)
        while True:  # a worker lost while the new ones start or load the checkpoint costs another restart
            if self.restarts >= limit:
                raise WorkerLostError(
                    f"{lost}; the run stops after {self.restarts} restart(s) "
                    f"(max_restarts={limit}), its last checkpoint kept"
                ) from None
            self.restarts += 1
            self.runtime.close()
            iteration = env_steps = 0
            try:
                self.runtime = self._make_runtime()
                if os.path.exists(path):
                    checkpoint = load_checkpoint(path)
                    _restore(self.runtime, checkpoint, self.config)
                    iteration, env_steps = int(checkpoint["iteration"]), int(checkpoint["env_steps"])
                break
            except WorkerLostError as again:
                lost = again
        self.lost_env_steps += self.env_steps - env_steps
        print(
            f"msrl: {lost}; restart {self.restarts}/{limit} from "
            f"{'the checkpoint at' if iteration else 'the start,'} iteration {iteration} "
            f"({self.env_steps - env_steps} env steps lost)",
            file=self.stream,
        )
        self.iteration, self.env_steps = iteration, env_steps
        self.metrics_file.close()
        self.scalars.close()
        metrics = os.path.join(self.run_dir, METRICS_NAME)
        _truncate_metrics(metrics, iteration)
        self.metrics_file = open(metrics, "a", encoding="utf-8")
        self.scalars = ScalarLog(self.run_dir, purge_step=env_steps + 1)

    def evaluate(self, episodes: int, seed: int | None = None) -> Evaluation:
        """Greedy evaluation of the current weights on ``episodes`` fresh environments."""
        seed = self.config.run.seed + EVAL_SEED_OFFSET if seed is None else seed
        algorithm = getattr(self.runtime, "algorithm", None)  # the live one, when it runs in this process
        if algorithm is None:  # the trained weights live in the workers
            algorithm = load_components(self.plan.recipe, self._recovering(self.runtime.state_dict))
        return evaluate_algorithm(algorithm, episodes, seed)

    def close(self) -> None:
        if not self.metrics_file.closed:
            self.metrics_file.close()
            self.scalars.close()
        self.runtime.close()
        _unlock(self.lock)
        self.lock = None


def train(
    config: str | os.PathLike | Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
    *,
    resume: str | os.PathLike | None = None,
    address: str | None = None,
    stream: TextIO = sys.stderr,
) -> Run:
    """Train as ``config`` says (a YAML path or a mapping, plus ``--set``-style overrides), or
    continue the run of checkpoint ``resume`` exactly; ``address`` joins a Ray cluster
    (``auto``, ``host:port``, ``ray://...``) instead of starting an embedded one when the
    policy needs Ray.  Writes the run directory and returns what it holds.

    Example::

        run = msrl.train("configs/ppo_cartpole.yaml", overrides=["total_env_steps=20000"])
        print(run.run_dir, len(run.metrics), run.evaluation.mean)
    """
    with Trainer(config, overrides, resume=resume, address=address, stream=stream) as trainer:
        print(f"msrl: run directory {trainer.run_dir} (policy {trainer.plan.fdg.policy.name})", file=stream)
        report = getattr(trainer.runtime, "placement_report", None)  # Ray runtimes: which node runs what
        if report is not None:
            lines = report()
            for line in lines:
                print(f"msrl: {line}", file=stream)
            with open(os.path.join(trainer.run_dir, PLACEMENT_NAME), "w", encoding="utf-8") as handle:
                handle.write("\n".join(lines) + "\n")
        trainer.run()
        evaluation = None
        if trainer.config.run.eval_episodes:
            evaluation = trainer.evaluate(trainer.config.run.eval_episodes)
            _write_json(
                os.path.join(trainer.run_dir, EVAL_NAME),
                {"episodes": evaluation.episodes, "returns": evaluation.returns, "mean": evaluation.mean},
            )
        return Run(
            trainer.run_dir,
            read_metrics(trainer.run_dir),
            evaluation,
            trainer.iteration,
            trainer.env_steps,
            trainer.wall_time,
        )


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
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


def _check_losses(output: Any, iteration: int) -> None:
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


def _check_complete(checkpoint: dict[str, Any], config: LoadedConfig, components: Sequence[str]) -> None:
    """Every component of the run has its state in the checkpoint: one left out would silently start
    fresh (an untrained actor, an empty buffer)."""
    states = checkpoint["components"]
    missing = [name for name in components if not isinstance(states, dict) or name not in states]
    if missing:
        raise CheckpointError(
            f"checkpoint has no state for component(s) {', '.join(map(repr, missing))} of "
            f"algorithm {config.run.algorithm!r}; it cannot be resumed"
        )


def _restore(runtime: Any, checkpoint: dict[str, Any], config: LoadedConfig) -> None:
    try:
        runtime.load_state_dict(checkpoint["components"])
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"checkpoint does not match algorithm {config.run.algorithm!r}: {str(exc).splitlines()[0][:200]}"
        ) from exc


def _new_run_dir(runs_dir: str, name: str) -> str:
    """``runs/<name>``, or ``runs/<name>_2``... so an earlier run's results are never overwritten."""
    os.makedirs(runs_dir, exist_ok=True)
    for suffix in range(1, 10_000):
        path = os.path.join(runs_dir, name if suffix == 1 else f"{name}_{suffix}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
    raise ConfigError(f"too many runs named {name!r} in {runs_dir!r}; choose another name")


LOCK_NAME = ".lock"


def _lock_run_dir(run_dir: str) -> Any:
    """An exclusive lock on ``run_dir`` for this process (``flock``, released when the process ends
    however it ends), or a one-line error naming the process that holds it."""
    import fcntl

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


def _unlock(handle: Any) -> None:
    if handle is not None and not handle.closed:
        handle.close()  # closing the file releases the flock


def _write_config(run_dir: str, raw: Mapping[str, Any]) -> None:
    tmp = os.path.join(run_dir, ".config.yaml.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        yaml.safe_dump(dict(raw), handle, sort_keys=False)
    os.replace(tmp, os.path.join(run_dir, "config.yaml"))


def _record_iteration(line: str) -> int | None:
    """A metrics line's iteration, or None for a line an interrupted write left incomplete."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return int(record.get("iteration", 0)) if isinstance(record, dict) else None


def _truncate_metrics(path: str, iteration: int) -> None:
    """Drop records written after the checkpoint, so a resumed run does not repeat iterations, and a
    last line an interrupted write left incomplete."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            number = _record_iteration(line) if line.strip() else None
            if number is not None and number <= iteration:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.writelines(kept)
    os.replace(tmp, path)


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    os.replace(tmp, path)


def _number(value: Any) -> Any:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else str(number)


def _progress_bar(run: Any, initial: int, stream: TextIO) -> Any:
    if not run.progress:
        return None
    from tqdm import tqdm

    return tqdm(
        total=run.total_env_steps,
        initial=initial,
        unit="step",
        unit_scale=True,
        file=stream,
        dynamic_ncols=True,
        mininterval=0.5,
        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}",
    )
