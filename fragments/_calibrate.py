"""Calibration for the cost model: a few iterations of the unsplit run (the ``local`` policy, in
this process, eager), measured node by node, then the same with half of every per-run quantity
(what one of two replicas builds), so the model can tell the part of a call that shrinks with a
replica's share from the part that does not; and the all-reduces a learner would make with copies."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any

from fragments._build import BuildRecipe, declare
from fragments._cost import Calibration
from fragments._local import LocalRuntime
from fragments._partition import partition
from fragments.executors import threads_for
from fragments.executors._instrument import NodeProfile, value_bytes
from msrl.core import ConfigError, MsrlError, Role, role_of, share, trace
from policies import DistributionPolicy

WARMUP_ITERATIONS = 3
WARMUP_S = 1.0
"""Warm-up before measuring: this many iterations, or this many seconds of them where fewer fill it."""
MEASURE_S = 1.0
"""Measure at least this long (and at least the iterations asked for)."""


class _CountingSync:
    """What a distribution policy installs on learners with copies, counting instead of averaging
    (with one copy an average leaves every tensor as it is)."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0

    def __call__(self, parameters: Any) -> None:
        self.mean_([p.grad for p in parameters if p.grad is not None])

    def mean_(self, tensors: list[Any]) -> None:
        if tensors:
            self.calls += 1
            self.bytes += value_bytes(list(tensors))


@dataclasses.dataclass
class _Measured:
    """The measured iterations: each call's seconds and each iteration's, by iteration."""

    profiles: list[NodeProfile] = dataclasses.field(default_factory=list)
    seconds: list[float] = dataclasses.field(default_factory=list)
    env_steps: int = 0
    """Of the last measured iteration."""
    allreduces: int = 0
    allreduce_bytes: int = 0

    @property
    def iteration_s(self) -> float:
        """The median iteration: one that a busy machine held up does not move it."""
        return statistics.median(self.seconds)

    @property
    def node_seconds(self) -> dict[str, float]:
        """Each node's median seconds an iteration."""
        names = self.profiles[0].seconds
        return {name: statistics.median(p.seconds.get(name, 0.0) for p in self.profiles) for name in names}


def calibrate(
    recipe: BuildRecipe,
    policy: DistributionPolicy,
    iterations: int = 3,
    warmup_env_steps: int = 0,
    budget_s: float = 60.0,
) -> Calibration:
    """Measure the in-process ``policy`` (``local``) of ``recipe`` node by node, its steps eager
    (``algo.compile: false``: a compiled step of a size not built yet would otherwise start a build
    that takes a core from the measurement, and compiled steps speed the same code under every
    policy): after a warm-up (``WARMUP_ITERATIONS``, and as many more as it takes to pass
    ``warmup_env_steps`` env steps: an off-policy learner's ``learning_starts``, before which it
    does not learn), at least ``iterations`` iterations and ``MEASURE_S`` seconds, each node taken
    at its median over them; then one iteration more with a counting gradient hook on every
    learner.  Then the same at half of every
    per-run quantity, where they divide by two.  A run that cannot finish within ``budget_s``
    seconds in all, or fails, is a ``ConfigError`` naming why."""
    if not policy.in_process:
        raise ValueError("calibrate runs an in-process (local) policy")
    started = time.perf_counter()
    recipe = _eager(recipe)
    whole = _measure(recipe, policy, iterations, warmup_env_steps, started, budget_s, count_allreduces=True)
    half: dict[str, float] = {}
    try:
        halved = share(recipe.config, 2)
    except ConfigError:  # a per-run quantity that does not halve: no replica count of 2 could run either
        halved = None
    if halved is not None:
        half_recipe = dataclasses.replace(recipe, config=halved, total_env_steps=max(1, recipe.total_env_steps // 2))
        measured = _measure(half_recipe, policy, iterations, warmup_env_steps // 2, started, budget_s)
        half = measured.node_seconds
    if not math.isfinite(whole.iteration_s) or whole.iteration_s <= 0 or whole.env_steps <= 0:
        raise ConfigError("calibration failed: the measured iterations took no env steps")
    return Calibration(
        node_seconds=whole.node_seconds,
        output_bytes=whole.profiles[0].output_bytes,
        env_steps=whole.env_steps,
        iteration_s=whole.iteration_s,
        allreduces=whole.allreduces,
        allreduce_bytes=whole.allreduce_bytes,
        threads=threads_for(policy.fragments[0]),
        half_node_seconds=half,
    )


def _eager(recipe: BuildRecipe) -> BuildRecipe:
    """``recipe`` with its compiled steps off (``algo.compile: false``), where it has the option."""
    fields = {f.name for f in dataclasses.fields(recipe.config)} if dataclasses.is_dataclass(recipe.config) else set()
    if "compile" not in fields or recipe.config.compile in (False, "false"):
        return recipe
    return dataclasses.replace(recipe, config=dataclasses.replace(recipe.config, compile="false"))


def _measure(
    recipe: BuildRecipe,
    policy: DistributionPolicy,
    iterations: int,
    warmup_env_steps: int,
    started: float,
    budget_s: float,
    count_allreduces: bool = False,
) -> _Measured:
    try:
        fdg = partition(trace(declare(recipe)), policy)
        runtime = LocalRuntime(recipe, fdg)
    except MsrlError:
        raise
    except Exception as exc:  # a component that cannot be built here
        raise ConfigError(f"calibration failed: the run cannot be built: {_line(exc)}") from exc
    try:
        steps, warmups, warm_start = 0, 0, time.perf_counter()
        while True:  # the first iterations of a process run slower (allocator, caches, lazy set-up)
            steps += _iterate(runtime).env_steps
            warmups += 1
            warm = warmups >= WARMUP_ITERATIONS or time.perf_counter() - warm_start >= WARMUP_S
            if steps >= warmup_env_steps and warm:
                break
            _check_budget(started, budget_s, f"the warm-up of {warmup_env_steps:,} env steps")
        instrument = runtime.executor.instrument
        measured = _Measured()
        begin = time.perf_counter()
        while len(measured.seconds) < iterations or time.perf_counter() - begin < MEASURE_S:
            profile = instrument.profile = NodeProfile()
            start = time.perf_counter()
            measured.env_steps = _iterate(runtime).env_steps
            measured.seconds.append(time.perf_counter() - start)
            measured.profiles.append(profile)
            _check_budget(started, budget_s, f"{iterations} measured iterations")
        instrument.profile = None
        if count_allreduces:
            counter = _CountingSync()
            learners = [c for c in runtime.components.values() if role_of(c) is Role.LEARNER]
            for learner in learners:
                learner.grad_sync = counter
            _iterate(runtime)
            for learner in learners:
                learner.grad_sync = None
            measured.allreduces, measured.allreduce_bytes = counter.calls, counter.bytes
    finally:
        runtime.close()
    return measured


def _iterate(runtime: LocalRuntime) -> Any:
    try:
        return runtime.run_iteration()
    except MsrlError:
        raise
    except Exception as exc:
        raise ConfigError(f"calibration failed: an iteration of the local run raised {_line(exc)}") from exc


def _check_budget(started: float, budget_s: float, what: str) -> None:
    if time.perf_counter() - started > budget_s:
        raise ConfigError(
            f"calibration failed: {what} did not finish within {budget_s:g} s; "
            "give the plan a smaller calibration (fewer envs or steps per iteration) or a config that learns sooner"
        )


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) < 300 else text[:297] + "..."


__all__ = ["calibrate"]
