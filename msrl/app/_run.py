"""Training runs: ``Trainer`` drives one iteration at a time (metrics, progress,
checkpoints, recovery from lost workers), and ``train`` runs it to the end and evaluates the
result.  Everything in the run's directory goes through its ``RunDirectory``.

Everything that can be wrong with the input (config, policy, checkpoint) is
checked before the run directory is created, so a bad command writes nothing.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from fragments import Runtime
from msrl.app._auto import resolve_auto
from msrl.app._checkpoint import load_checkpoint
from msrl.app._config import LoadedConfig, RunConfig, load_config
from msrl.app._elastic import change_line, cluster_nodes, fitting_counts, start_counts, with_counts
from msrl.app._evaluate import Evaluation
from msrl.app._load import LOADED_ROLES, eval_seed, evaluate_states
from msrl.app._plan import Plan, make_runtime, plan
from msrl.app._records import check_losses, iteration_record
from msrl.app._run_directory import CHECKPOINT_NAME, Position, RunDirectory
from msrl.core import (
    CheckpointError,
    ConfigError,
    DivergenceError,
    EnvError,
    HeadLostError,
    HostLostError,
    StorageError,
    WorkerLostError,
    role_of,
)

COUNTERS = ("iteration", "env_steps", "restarts", "lost_env_steps")
"""Where a run stands, in its checkpoint and in every metrics record: ``restarts`` counts recoveries
from lost workers over the whole run, ``lost_env_steps`` the steps trained and lost with them."""
T = TypeVar("T")


@dataclass
class Run:
    """What ``msrl.train`` returns: where the results are and what they say.

    ``metrics`` holds one record per iteration (what ``metrics.jsonl`` holds, earlier
    iterations of a resumed run included); ``evaluation`` the final greedy
    evaluation, or None when ``eval_episodes`` is 0.  ``iterations``, ``env_steps`` and
    ``wall_time`` (training seconds: every iteration with its record and checkpoints) count the
    whole run alike, a resumed one's earlier sessions included; ``resumed_at`` is the iteration
    this session resumed the run from (None for a run started here)."""

    run_dir: str
    metrics: list[dict[str, Any]]
    evaluation: Evaluation | None
    iterations: int
    env_steps: int
    wall_time: float
    resumed_at: int | None = None
    stopped_by: str | None = None
    """The signal (``SIGTERM``, ``SIGINT``) that stopped the run before its budget, at a checkpoint."""
    checkpoint_iteration: int | None = None
    """The iteration of the run's last checkpoint written (None: none could be)."""

    def summary(self) -> str:
        """The line ``msrl train`` ends with: what the run trained, and where its results are."""
        whole = "" if self.resumed_at is None else f" (the whole run; resumed at iteration {self.resumed_at})"
        return (
            f"trained {self.iterations} iterations, {self.env_steps:,} env steps in {self.wall_time:.1f} s{whole}; "
            f"results in {self.run_dir}"
        )

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.run_dir, CHECKPOINT_NAME)

    def stop_line(self) -> str:
        """The line a run stopped by a signal ends with: where it stopped and how to go on."""
        where = f"msrl: stopped by {self.stopped_by} at iteration {self.iterations} ({self.env_steps:,} env steps)"
        if self.checkpoint_iteration is None:
            return f"{where}; no checkpoint could be written"
        at = "" if self.checkpoint_iteration == self.iterations else f" (iteration {self.checkpoint_iteration})"
        return f"{where}; checkpoint {self.checkpoint}{at}; continue with: msrl train --resume {self.checkpoint}"


class Interrupted(KeyboardInterrupt):
    """A second stop signal: the run stops at once, its last checkpoint (if any) as it was.
    ``signum``: the signal."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


def read_config(
    config: str | os.PathLike[str] | Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
    resume: str | os.PathLike[str] | None = None,
) -> tuple[LoadedConfig, dict[str, Any] | None]:
    """The checked config of a run (from a file, a mapping, or a checkpoint to resume) and the checkpoint."""
    checkpoint = load_checkpoint(os.fspath(resume)) if resume is not None else None
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
        config: str | os.PathLike[str] | Mapping[str, Any] | None,
        overrides: Sequence[str] = (),
        *,
        resume: str | os.PathLike[str] | None = None,
        address: str | None = None,
        stream: TextIO = sys.stderr,
    ) -> None:
        self.config, checkpoint = read_config(config, overrides, resume)
        self.config, placement = resolve_auto(self.config, address)
        if placement is not None:
            print(placement.choice_line(), file=stream)
        self.config, chosen = start_counts(self.config, address)
        if chosen is not None:
            print(chosen, file=stream)
        self.plan = plan(self.config)
        self.stream, self.address = stream, address
        self.runtime, self.directory = _open_run(self.plan, address, checkpoint, resume)
        self.run_dir = self.directory.path
        if placement is not None:
            self.directory.write_plan(placement.to_dict())
        saved = checkpoint or {}  # a resumed run's counters go on from its checkpoint's
        self.iteration, self.env_steps, self.restarts, self.lost_env_steps = (int(saved.get(k, 0)) for k in COUNTERS)
        self.resumed_at = None if checkpoint is None else self.iteration
        self.wall_time = self._seconds_at(checkpoint)  # training seconds of the whole run, like the counters
        self.last_return, self.steps_per_iteration = float("nan"), 0
        self.compiling: tuple[str, ...] = ()  # compiled regions still being built, after the last iteration
        self.switched: dict[str, float] = {}  # those switched to after it, and how long they took to build
        self.closed = False
        self.stop_requested: str | None = None  # why the run should stop at its next iteration boundary
        self.started_next = False  # the last iteration let the next one start early in the workers
        self.last_iteration_s = 0.0
        self.last_save_s = 0.0
        self.checkpoint_iteration = self.resumed_at  # the last checkpoint written, None before the first
        self.draining: dict[str, float] | None = None  # nodes Ray drains, whose fragments move at the next boundary
        self.nodes_seen: list[dict[str, float]] | None = None  # the cluster an elastic run last sized itself for
        self.note: Callable[[str], None] = lambda line: print(line, file=stream)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if isinstance(exc, HeadLostError):  # Ray calls would hang now: the workers go with the cluster
            self.directory.close()
            where = self.directory.checkpoint_path
            kept = f"its last checkpoint kept; continue it on a new cluster with: msrl train --resume {where}"
            if not os.path.exists(where):
                kept = "it had written no checkpoint yet"
            raise HeadLostError(f"{exc}; the run stops at iteration {self.iteration}, {kept}") from None
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
        self._check_open("step")
        return self._recovering(self._step)

    def _step(self) -> dict[str, Any]:
        start = time.perf_counter()
        more = self._another_follows()
        try:
            result = self.runtime.run_iteration(more=more)
        except (DivergenceError, EnvError) as exc:  # where it happened, and in which iteration of the run
            raise type(exc)(f"iteration {self.iteration + 1}: {exc}") from exc
        check_losses(result.output, self.iteration + 1)
        elapsed = time.perf_counter() - start
        # an in-process run starts nothing early; Ray workers may have begun the next iteration
        self.started_next = more and not self.plan.fdg.policy.in_process
        self.last_iteration_s = elapsed
        self.iteration += 1
        self.env_steps += result.env_steps
        self.steps_per_iteration = result.env_steps
        self.last_return = result.component_metrics.get("episode_return", self.last_return)
        self.compiling, self.switched = result.compiling, result.compiled
        record = iteration_record(
            result, elapsed, self.plan.agents_per_env, replicas=self._elastic_counts(), **self._counters()
        )
        try:
            self.directory.record(record)
        except StorageError as exc:  # a record that cannot be kept: the run stops rather than lose it
            raise StorageError(
                f"{exc}; iteration {self.iteration} is not recorded and the run stops, {self._kept()}"
            ) from None
        self.wall_time += time.perf_counter() - start
        every = self.config.run.checkpoint_every
        if every and self.iteration % every == 0:
            start = time.perf_counter()
            self._checkpoint()
            self.wall_time += time.perf_counter() - start
        return record

    def _checkpoint(self) -> None:
        """``save``, where the run directory cannot take the checkpoint doing what
        ``on_checkpoint_error`` says: stop with one line, or go on without it and say so."""
        try:
            self.save()
        except StorageError as exc:
            kept = self._kept()
            if self.config.run.on_checkpoint_error != "continue":
                raise StorageError(f"{exc}; the run stops at iteration {self.iteration}, {kept}") from None
            self.note(
                f"msrl: the checkpoint of iteration {self.iteration} not written: {exc}; the run goes on "
                f"without it (on_checkpoint_error: continue), {kept}"
            )

    def record_placement(self) -> list[str]:
        """Which node runs each fragment replica (Ray runtimes), written to ``placement.txt`` and
        returned as lines; nothing for an in-process run. Called again whenever workers restart."""
        report = getattr(self.runtime, "placement_report", None)
        if report is None:
            return []
        lines = report()
        self.directory.write_placement(lines)
        return lines

    def _kept(self) -> str:
        """What a run that stops now leaves to resume from."""
        where = self.directory.checkpoint_path
        if self.checkpoint_iteration is None or not os.path.exists(where):
            return "it has written no checkpoint yet"
        return f"its last checkpoint {where} (iteration {self.checkpoint_iteration}) kept"

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for and every iteration already started has finished."""
        return self.stop_requested is not None and not self.started_next

    def request_stop(self, reason: str) -> None:
        """Stop at the next iteration boundary: ``run`` then checkpoints and returns. An iteration
        that let the next one start early in the workers is followed by that one first, so the
        checkpoint is taken where the workers hold no iteration in flight, as a due one is."""
        self.stop_requested = reason

    def run(self) -> None:
        """Iterate until the budget is spent (or a stop is requested: ``request_stop``, or
        ``SIGTERM``/``SIGINT`` while this runs on the main thread), with a progress bar; then
        checkpoint. A second signal stops at once (``Interrupted``), the last checkpoint intact."""
        with _ProgressBar(self.config.run, self.env_steps, self.stream) as bar, self._stop_signals(bar):
            self.note = bar.note
            while True:
                while not self.done and not self.stopping:
                    record = self.step()
                    if self.switched:
                        bar.note(switch_line(self.switched, self.iteration + 1))
                    bar.show(record, self.last_return, self.compiling)
                    self._watch_drain()
                    self._watch_growth()
                try:
                    self._checkpoint()
                    break
                except WorkerLostError as exc:  # back to the last checkpoint: train from there again
                    self._recover(exc)
            if self.compiling:
                names = " and ".join(self.compiling)
                them = "them" if len(self.compiling) > 1 else "it"
                bar.note(f"msrl: compiled {names} still building in the background; the next run starts with {them}")

    @contextmanager
    def _stop_signals(self, bar: _ProgressBar) -> Iterator[None]:
        """``SIGTERM`` and ``SIGINT`` ask the run to stop at its next iteration boundary (a
        preemption's notice, ``ray job stop``, Ctrl-C); a second one stops it at once. Handlers are
        only the main thread's to set: elsewhere, and after ``run``, signals act as before."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        kept = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}

        def handle(number: int, frame: object) -> None:
            name = signal.Signals(number).name
            if self.stop_requested is not None:
                raise Interrupted(
                    f"a second {name}: stopped at once in iteration {self.iteration + 1}; {self._kept()}", number
                )
            self.request_stop(name)
            iterations = 1 + int(self.started_next)
            bound = iterations * self.last_iteration_s + self.last_save_s
            after = "this iteration and the next" if iterations > 1 else "this iteration"
            try:  # the handler may have interrupted a write to the same stream: then the final line says it
                bar.note(
                    f"msrl: {name}: stopping after {after} and a checkpoint (about {max(bound, 0.1):.1f} s); "
                    "a second signal stops at once"
                )
            except (RuntimeError, OSError):
                pass

        for number in kept:
            signal.signal(number, handle)
        try:
            yield
        finally:
            for number, previous in kept.items():
                signal.signal(number, previous)

    def _another_follows(self) -> bool:
        """Whether another iteration follows the next one with no checkpoint between (it may start early)."""
        every = self.config.run.checkpoint_every
        if not self.steps_per_iteration or (every and (self.iteration + 1) % every == 0):
            return False
        if self.stop_requested is not None or self.draining is not None:
            return False
        return self.env_steps + self.steps_per_iteration < self.config.run.total_env_steps

    def _watch_drain(self) -> None:
        """Between iterations: where Ray drains a node that holds replicas of the run (a preemption's
        notice, ``ray drain-node``), move them at the next iteration boundary (once the workers hold
        no iteration begun early): checkpoint, then the same workers started anew on the nodes Ray
        still schedules on, from that checkpoint. Nothing is lost; where the checkpoint could not be
        written, the move goes back to the last one, as a lost worker's restart does."""
        if self.done or self.stop_requested is not None:  # the run's own checkpoint comes next
            return
        if self.draining is None:
            draining = getattr(self.runtime, "draining", None)
            nodes = draining() if draining is not None else {}
            if not nodes:
                return
            self.draining = nodes
            deadlines = ", ".join(
                f"{node} ({'no deadline' if math.isinf(left) else f'{left:.0f} s left'})"
                for node, left in nodes.items()
            )
            self.note(f"msrl: draining {deadlines}: its fragments move after a checkpoint at this iteration's end")
        if not self.started_next:
            self._move()

    def _move(self) -> None:
        """Checkpoint, then start the workers anew away from the draining nodes and load it."""
        assert self.draining is not None
        nodes = ", ".join(self.draining)
        started = time.perf_counter()
        self._checkpoint()
        before = Position(self.iteration, self.env_steps)
        self.runtime.close()
        try:
            back, checkpoint = self._restart_workers(f"node {nodes} drained")
        except WorkerLostError as lost:  # a worker lost while the new ones start: a restart, as any loss
            self.draining = None
            self._recover(lost)
            return
        except (HostLostError, ConfigError) as short:  # the nodes left cannot hold the policy
            raise HostLostError(
                f"node {nodes} is draining and the rest of the cluster cannot hold the policy: {short}; {self._kept()}"
            ) from None
        self.draining = None
        if back != before:  # the checkpoint of this boundary could not be written: back to the last one
            self.lost_env_steps += before.env_steps - back.env_steps
            self.iteration, self.env_steps = back
            self.directory.rewind(back)
            self.wall_time = self._seconds_at(checkpoint)
        lines = self.record_placement()
        took = time.perf_counter() - started
        self.note(f"msrl: moved off {nodes} in {took:.1f} s, from iteration {back.iteration}: {'; '.join(lines)}")

    def _start_workers(self) -> tuple[Position, dict[str, Any] | None]:
        """Start the plan's workers and load the last checkpoint into them (none: from the start)."""
        self.runtime = make_runtime(self.plan, self.address)
        checkpoint = self.directory.load_checkpoint()
        back = Position(0, 0) if checkpoint is None else _restore(self.runtime, checkpoint, self.config)
        return back, checkpoint

    def _restart_workers(self, why: str) -> tuple[Position, dict[str, Any] | None]:
        """``_start_workers`` after workers were lost or moved. Where the cluster left cannot hold
        the policy, an elastic one goes on with as many replicas as it does, saying what changed."""
        try:
            return self._start_workers()
        except (HostLostError, ConfigError):
            counts = fitting_counts(self.config, cluster_nodes()) if self.config.policy.elastic else None
            if counts is None or counts == self._elastic_counts():
                raise
            self._use_counts(counts, why)
            return self._start_workers()

    def _use_counts(self, counts: Mapping[str, int], why: str) -> None:
        """Run the elastic fragments with ``counts`` replicas from now on (the next workers started)."""
        line = change_line(self.config, self._elastic_counts(), counts, why)
        self.config = with_counts(self.config, counts)
        self.plan = plan(self.config)
        self.note(line)

    def _elastic_counts(self) -> dict[str, int]:
        """Elastic fragment -> the replicas it runs with now (nothing for a policy with fixed counts)."""
        policy = self.config.policy
        return {name: count for name, count in policy.counts().items() if name in policy.elastic}

    def _watch_growth(self) -> None:
        """At a checkpoint boundary of an elastic run: where the cluster changed since the run last
        sized itself and now holds more replicas, start them from the checkpoint just written.
        Where they cannot be placed after all (other work holds the resources), the run goes on
        with the replicas it had, and tries again once the cluster changes."""
        now = self._elastic_counts()
        if not now or self.done or self.stop_requested is not None or self.draining is not None:
            return
        if self.checkpoint_iteration != self.iteration or self.started_next:
            return
        nodes = cluster_nodes()
        if nodes == self.nodes_seen:
            return
        self.nodes_seen = nodes
        counts = fitting_counts(self.config, nodes)
        if counts is None or counts == now or any(counts[name] < now[name] for name in now):
            return
        before_config, before_plan = self.config, self.plan
        self.runtime.close()
        self._use_counts(counts, f"the cluster grew to {len(nodes)} nodes")
        try:
            self._start_workers()
        except WorkerLostError as lost:
            self._recover(lost)
            return
        except (HostLostError, ConfigError) as short:
            self.note(f"msrl: elastic policy: cannot grow now ({short}); it goes on as it was")
            self.config, self.plan = before_config, before_plan
            try:
                self._start_workers()
            except WorkerLostError as lost:
                self._recover(lost)
                return
        self.record_placement()

    def save(self) -> None:
        """Write the checkpoint (atomically): config, counters and every component's state."""
        self._check_open("save")
        start = time.perf_counter()
        components = self.runtime.state_dict()
        payload = {"config": self.config.raw, **self._counters(), "wall_time": self.wall_time, "components": components}
        self.directory.save_checkpoint(payload)
        self.checkpoint_iteration = self.iteration
        self.last_save_s = time.perf_counter() - start

    def _seconds_at(self, checkpoint: Mapping[str, Any] | None) -> float:
        """The run's training seconds up to ``checkpoint`` (none at the start): saved in it, or, in
        a checkpoint saved without them, the sum of the ``wall_time`` of the iterations before it."""
        if checkpoint is None:
            return 0.0
        if "wall_time" in checkpoint:
            return float(checkpoint["wall_time"])
        return sum(float(record.get("wall_time", 0.0)) for record in self.directory.metrics())

    def _counters(self) -> dict[str, int]:
        """The run's ``COUNTERS``, as checkpoints and metrics records hold them."""
        return dict(zip(COUNTERS, (self.iteration, self.env_steps, self.restarts, self.lost_env_steps)))

    def _recovering(self, action: Callable[[], T]) -> T:
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
        limit, before = self.config.run.max_restarts, Position(self.iteration, self.env_steps)
        while True:  # a worker lost while the new ones start or load the checkpoint costs another restart
            if self.restarts >= limit:
                raise WorkerLostError(
                    f"{lost}; the run stops after {self.restarts} restart(s) "
                    f"(max_restarts={limit}), its last checkpoint kept"
                ) from None
            self.restarts += 1
            self.runtime.close()
            try:
                back, checkpoint = self._restart_workers("the nodes that answer hold no more")
                break
            except WorkerLostError as again:
                lost = again
            except (HostLostError, ConfigError) as short:  # what is left of the cluster cannot hold the policy
                raise HostLostError(f"{lost}; the run cannot restart: {short}; its last checkpoint kept") from None
        lost_steps = before.env_steps - back.env_steps
        self.lost_env_steps += lost_steps
        origin = f"{'the checkpoint at' if back.iteration else 'the start,'} iteration {back.iteration}"
        print(
            f"msrl: {lost}; restart {self.restarts}/{limit} from {origin} ({lost_steps} env steps lost)",
            file=self.stream,
        )
        self.iteration, self.env_steps = back
        self.directory.rewind(back)
        self.wall_time = self._seconds_at(checkpoint)  # the seconds of the steps it goes back on, like them
        self.record_placement()  # the new workers may be elsewhere

    def evaluate(self, episodes: int, seed: int | None = None) -> Evaluation:
        """Greedy evaluation of the current weights on ``episodes`` fresh environments, from the
        run's evaluation seed by default: what ``msrl eval`` of the checkpoint saved now gives."""
        self._check_open("evaluate")
        seed = eval_seed(self.config) if seed is None else seed
        algorithm = getattr(self.runtime, "algorithm", None)  # the live one, when it runs in this process
        if algorithm is None:  # the trained weights live in the workers
            states = self._recovering(self.runtime.state_dict)
        else:  # the actors' and learners': a replay buffer's state is a copy of all it holds
            kept = {name: c for name, c in algorithm.components().items() if role_of(c) in LOADED_ROLES}
            states = {name: component.state_dict() for name, component in kept.items()}
        return evaluate_states(self.plan.recipe, self.plan.fdg.policy, states, episodes, seed)

    def close(self) -> None:
        """Stop the workers and close the run directory (its logs, then its lock)."""
        self.closed = True
        try:
            self.runtime.close()
        finally:
            self.directory.close()

    def _check_open(self, action: str) -> None:
        if self.closed:
            raise RuntimeError(f"msrl Trainer: cannot {action} after close(): its workers are stopped")


def train(
    config: str | os.PathLike[str] | Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
    *,
    resume: str | os.PathLike[str] | None = None,
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
        for line in trainer.record_placement():
            print(f"msrl: {line}", file=stream)
        trainer.run()
        evaluation = None
        if trainer.config.run.eval_episodes and trainer.stop_requested is None:
            evaluation = trainer.evaluate(trainer.config.run.eval_episodes)
            trainer.directory.write_evaluation(evaluation)
        return Run(
            trainer.run_dir,
            trainer.directory.metrics(),
            evaluation,
            trainer.iteration,
            trainer.env_steps,
            trainer.wall_time,
            trainer.resumed_at,
            trainer.stop_requested,
            trainer.checkpoint_iteration,
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


def _open_run(
    plan: Plan, address: str | None, checkpoint: dict[str, Any] | None, resume: str | os.PathLike[str] | None
) -> tuple[Runtime, RunDirectory]:
    """The run's runtime, started, and its directory, locked and ready for records: a new one, or
    with a checkpoint to resume, the checkpoint's own, its metrics rewound to it and the
    checkpoint's state loaded.  A failure on the way closes what was opened, in reverse order."""
    with ExitStack() as undo:
        if checkpoint is not None:
            _check_complete(checkpoint, plan.config, list(plan.fdg.graph.components))
        if resume is not None:  # locked before anything starts: two resumes of one checkpoint would
            # otherwise both run and leave one's checkpoint beside the other's metrics
            directory = undo.enter_context(RunDirectory.reopen(os.path.dirname(os.path.abspath(resume))))
        runtime = make_runtime(plan, address)
        undo.callback(runtime.close)
        if checkpoint is None:  # created once the runtime started: a run that cannot start writes nothing
            directory = undo.enter_context(RunDirectory.create(plan.config.run.runs_dir, plan.config.run.name))
        directory.start(plan.config.raw, None if checkpoint is None else _restore(runtime, checkpoint, plan.config))
        undo.pop_all()
    return runtime, directory


def _restore(runtime: Runtime, checkpoint: dict[str, Any], config: LoadedConfig) -> Position:
    """Load the checkpoint's component states into the runtime; where the run stood then."""
    try:
        runtime.load_state_dict(checkpoint["components"])
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"checkpoint does not match algorithm {config.run.algorithm!r}: {str(exc).splitlines()[0][:200]}"
        ) from exc
    return Position(int(checkpoint["iteration"]), int(checkpoint["env_steps"]))


def switch_line(switched: Mapping[str, float], iteration: int) -> str:
    """The line that says which compiled regions took over, and from which iteration."""
    names = " and ".join(sorted(switched))
    return f"msrl: compiled {names} ready after {max(switched.values()):.0f} s; switching at iteration {iteration}"


class _ProgressBar:
    """A tqdm bar over the run's env-step budget, with the last return and the throughput; nothing
    when the config turns progress off."""

    def __init__(self, run: RunConfig, initial: int, stream: TextIO) -> None:
        self.bar: Any = None  # a tqdm bar (tqdm has no type hints)
        self.stream = stream
        if run.progress:
            from tqdm import tqdm

            self.bar = tqdm(
                total=run.total_env_steps,
                initial=initial,
                unit="step",
                unit_scale=True,
                file=stream,
                dynamic_ncols=True,
                mininterval=0.5,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}",
            )

    def show(self, record: Mapping[str, Any], last_return: float, compiling: Sequence[str] = ()) -> None:
        if self.bar is not None:
            # the postfix first, without a redraw of its own: update() redraws at most every mininterval,
            # where set_postfix_str's default redrew the bar every iteration (SAC: 20,000 redraws)
            shown = f"{last_return:7.1f}" if math.isfinite(last_return) else "      -"  # no episode ended yet
            postfix = f"return {shown}  {record['steps_per_s']:,.0f} steps/s"
            if compiling:
                postfix += f"  (compiling {' and '.join(compiling)})"
            self.bar.set_postfix_str(postfix, refresh=False)
            self.bar.update(min(record["env_steps"], self.bar.total) - self.bar.n)

    def note(self, line: str) -> None:
        """A line above the bar (or on its own where there is no bar)."""
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream)

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
