"""The run loop: build -> trace -> partition -> deploy -> iterate, with metrics,
progress, checkpoints and a final greedy evaluation.

Everything that can be wrong with the input (config, policy, checkpoint) is
checked before the run directory is created, so a bad command writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml

from msrl._algorithm import RunInfo, get_algorithm
from msrl._checkpoint import load_checkpoint, save_checkpoint
from msrl._config import LoadedConfig, load_config
from msrl._errors import CheckpointError, ConfigError
from msrl._evaluate import evaluate
from msrl._runtime import make_runtime
from msrl._tracing import trace

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.jsonl"


@dataclass
class TrainResult:
    run_dir: str
    iterations: int
    env_steps: int
    wall_time: float
    eval_returns: list[float] = field(default_factory=list)

    @property
    def eval_mean(self) -> float:
        return sum(self.eval_returns) / len(self.eval_returns) if self.eval_returns else float("nan")


def build(config: LoadedConfig, replica: int = 0, num_replicas: int = 1, device: str = "cpu") -> Any:
    """Instantiate the configured algorithm (also used by remote workers).

    ``algo.num_envs`` is the run's total: each of ``num_replicas`` replicas of a
    fragment gets an equal share, so every policy collects the same batch per
    iteration and learns with the same dynamics as ``local``."""
    run = config.run
    info = RunInfo(seed=run.seed, total_env_steps=run.total_env_steps, replica=replica, num_replicas=num_replicas, device=device)
    algo = config.algo
    if num_replicas > 1 and hasattr(algo, "num_envs"):
        algo = dataclasses.replace(algo, num_envs=algo.num_envs // num_replicas)
    return get_algorithm(run.algorithm)(algo, info)


def _check_replicas(config: LoadedConfig, policy: Any) -> None:
    total = getattr(config.algo, "num_envs", None)
    for spec in policy.fragments:
        if total is not None and total % spec.replicas:
            raise ConfigError(f"algo.num_envs ({total}) must be divisible by the {spec.replicas} replicas of fragment "
                              f"{spec.name!r}: each replica steps an equal share")


def plan(config: LoadedConfig) -> tuple[Any, Any]:
    """Build, trace and partition: everything short of starting the run."""
    from fragments import partition
    from fragments.executors import get_executor
    from policies import load_policy

    policy = load_policy(config.run.policy)
    if policy.in_process:  # remote fragments are checked where they run
        for spec in policy.fragments:
            get_executor(spec.executor).check_available(spec)
    _check_replicas(config, policy)
    device = policy.fragments[0].device if policy.in_process else "cpu"
    algorithm = build(config, device=device)
    return algorithm, partition(trace(algorithm), policy)


def train(
    config_path: str | None = None,
    overrides: list[str] = (),
    resume: str | None = None,
    address: str | None = None,
    stream: TextIO = sys.stderr,
) -> TrainResult:
    checkpoint = load_checkpoint(resume) if resume else None
    if checkpoint is not None:
        config = load_config(None, overrides, base=checkpoint["config"])
    elif config_path is None:
        raise ConfigError("train needs a CONFIG file or --resume CHECKPOINT")
    else:
        config = load_config(config_path, overrides)
    algorithm, fdg = plan(config)
    runtime = make_runtime(fdg, algorithm, address=address, config=config)
    try:
        iteration = env_steps = 0
        if checkpoint is not None:
            _restore(runtime, checkpoint, config)
            iteration, env_steps = int(checkpoint["iteration"]), int(checkpoint["env_steps"])
            run_dir = os.path.dirname(os.path.abspath(resume))
            _truncate_metrics(os.path.join(run_dir, METRICS_NAME), iteration)
        else:
            run_dir = _new_run_dir(config.run.runs_dir, config.run.name)
            with open(os.path.join(run_dir, "config.yaml"), "w", encoding="utf-8") as handle:
                yaml.safe_dump(config.raw, handle, sort_keys=False)
        print(f"msrl: run directory {run_dir} (policy {fdg.policy.name})", file=stream)
        loop = _Loop(config, runtime, run_dir, iteration, env_steps, stream)
        loop.run()
        returns: list[float] = []
        if config.run.eval_episodes:
            if not fdg.policy.in_process:  # the trained weights live in the workers
                load_actors(algorithm, runtime.state_dict())
            returns = evaluate(algorithm, config.run.eval_episodes, seed=config.run.seed + 7919)
            _write_json(os.path.join(run_dir, "eval.json"), {"episodes": len(returns), "returns": returns,
                                                             "mean": sum(returns) / len(returns)})
        return TrainResult(run_dir, loop.iteration, loop.env_steps, loop.wall_time, returns)
    finally:
        runtime.close()


class _Loop:
    """Iterates until the env-step budget is spent, recording and checkpointing."""

    def __init__(self, config: LoadedConfig, runtime: Any, run_dir: str, iteration: int, env_steps: int, stream: TextIO) -> None:
        self.config, self.runtime, self.run_dir = config, runtime, run_dir
        self.iteration, self.env_steps, self.stream = iteration, env_steps, stream
        self.wall_time = 0.0
        self.last_return = float("nan")
        self.steps_per_iteration = 0  # known after the first iteration

    def run(self) -> None:
        run = self.config.run
        bar = _progress_bar(run, self.env_steps, self.stream)
        start = time.perf_counter()
        try:
            with open(os.path.join(self.run_dir, METRICS_NAME), "a", encoding="utf-8") as metrics_file:
                while self.env_steps < run.total_env_steps:
                    record = self._iterate()
                    metrics_file.write(json.dumps(record) + "\n")
                    metrics_file.flush()
                    if bar is not None:
                        bar.update(min(record["env_steps"], bar.total) - bar.n)
                        bar.set_postfix_str(f"return {self.last_return:7.1f}  {record['steps_per_s']:,.0f} steps/s")
                    if run.checkpoint_every and self.iteration % run.checkpoint_every == 0:
                        self.save()
        finally:
            if bar is not None:
                bar.close()
            self.wall_time = time.perf_counter() - start
        self.save()

    def _iterate(self) -> dict[str, Any]:
        start = time.perf_counter()
        result = self.runtime.run_iteration(more=self._another_follows())
        elapsed = time.perf_counter() - start
        self.iteration += 1
        self.env_steps += result.env_steps
        self.steps_per_iteration = result.env_steps
        if "episode_return" in result.component_metrics:
            self.last_return = result.component_metrics["episode_return"]
        record: dict[str, Any] = {"iteration": self.iteration, "env_steps": self.env_steps, "wall_time": elapsed,
                                  "steps_per_s": result.env_steps / elapsed if elapsed > 0 else 0.0}
        record.update({k: _number(v) for k, v in result.component_metrics.items()})
        if isinstance(result.output, dict):
            record.update({k: _number(v) for k, v in result.output.items()})
        phases = dict(result.timings)
        phases.setdefault("communication", 0.0)
        record.update({f"time_{phase}": seconds for phase, seconds in sorted(phases.items())})
        return record

    def _another_follows(self) -> bool:
        """Whether the iteration about to run will be followed by another with no checkpoint
        in between (the runtime may then start that one early)."""
        every = self.config.run.checkpoint_every
        if not self.steps_per_iteration or (every and (self.iteration + 1) % every == 0):
            return False
        return self.env_steps + self.steps_per_iteration < self.config.run.total_env_steps

    def save(self) -> None:
        save_checkpoint(os.path.join(self.run_dir, CHECKPOINT_NAME), {
            "config": self.config.raw,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "components": self.runtime.state_dict(),
        })


def load_actors(algorithm: Any, states: dict[str, Any]) -> None:
    """Load the actors' saved state into ``algorithm``: all greedy evaluation needs,
    and all that fits whatever number of replicas the environments were split in."""
    from msrl._tracing import role_of

    for name, component in algorithm.components().items():
        if role_of(component) == "actor" and name in states:
            component.load_state_dict(states[name])


def _restore(runtime: Any, checkpoint: dict[str, Any], config: LoadedConfig) -> None:
    try:
        runtime.load_state_dict(checkpoint["components"])
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint does not match algorithm {config.run.algorithm!r}: {str(exc).splitlines()[0][:200]}") from exc


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


def _truncate_metrics(path: str, iteration: int) -> None:
    """Drop records written after the checkpoint, so a resumed run does not repeat iterations."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as handle:
        kept = [line for line in handle if line.strip() and json.loads(line).get("iteration", 0) <= iteration]
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

    return tqdm(total=run.total_env_steps, initial=initial, unit="step", unit_scale=True, file=stream, dynamic_ncols=True,
                mininterval=0.5, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}")
