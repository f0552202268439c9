"""What the hidden-state tests share: stand-in components, an algorithm that stores every kind
of attribute, and the check that a ``HiddenStateError`` is one line pointing at the marked line.

The components are stand-ins: the tracer never runs their methods.  A line a test expects an
error at carries the comment ``# <- hidden``.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import linecache
import os
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import msrl

MARKER = "# <- hidden"


class Env(msrl.Environment):
    def observe(self) -> msrl.Batched: ...

    def step(self, action) -> tuple[msrl.Batched, msrl.Batched]: ...


class Policy(msrl.Actor):
    def act(self, obs) -> msrl.Batched: ...

    def explore(self, obs) -> msrl.Batched:
        # A draw inside a component is fine: component methods run every iteration.
        return obs + random.random()


class Learner(msrl.Learner):
    def learn(self, values, gamma, limits, sizes) -> msrl.Global: ...

    def sync_target(self) -> msrl.NoValue: ...


class Mode(enum.Enum):
    FAST = "fast"


@dataclasses.dataclass
class Config:
    num_steps: int = 3
    num_envs: int = 2
    gamma: float = 0.99
    hidden_sizes: list = dataclasses.field(default_factory=lambda: [64, 64])

    @property
    def batch_size(self) -> int:
        return self.num_steps * self.num_envs

    def validate(self) -> None: ...


class Helper:
    scale = 2

    def compute(self) -> int:
        return 1


TICKS = itertools.count()
GLOBAL_RNG = random.Random(0)
GLOBAL_NP_RNG = np.random.default_rng(0)


class Algo(msrl.Algorithm):
    def __init__(self) -> None:
        super().__init__(Config(), msrl.RunInfo(seed=7, total_env_steps=600))
        self.env, self.actor, self.learner = Env(), Policy(), Learner()
        # Anything may be stored; only using it as state from train_step is refused.
        self.ticks = itertools.count()
        self.history = [1, 2, 3]
        self.rows = [[1], [2]]
        self.counts = {"a": 1}
        self.seen = {1, 2}
        self.rng = random.Random(0)
        self.np_rng = np.random.default_rng(0)
        self.helper = Helper()
        self.schedule = lambda t: 0.1 * t
        self.mask = torch.ones(3)
        self.array = np.ones(3)
        self.net = torch.nn.Linear(2, 2)
        self.limits = (1, 2.5, "x", None, b"y", (True, Mode.FAST))
        self.mode = Mode.FAST

    @property
    def discount(self) -> float:
        return self.config.gamma

    @staticmethod
    def clip(x: float) -> float:
        return min(x, 1.0)

    def rollout(self, obs):
        """A helper method: it runs on the view, like train_step."""
        for _ in msrl.steps(self.config.num_steps):
            obs, reward = self.env.step(self.actor.act(obs))
        return obs

    def noisy_rollout(self, obs):
        if random.random() < 0.1:  # <- hidden
            obs = self.actor.explore(obs)
        return self.rollout(obs)

    def train_step(self):
        obs = self.rollout(self.env.observe())
        # Plain data reads as itself, through configs, properties, tuples and containers.
        assert self.config.batch_size == self.config.num_steps * self.config.num_envs == 6
        assert (self.run.seed, self.run.total_env_steps) == (7, 600)
        assert self.mode is Mode.FAST and self.limits[4:] == (b"y", (True, Mode.FAST))
        assert self.history[0] == 1 and len(self.history) == 3 and [n * 2 for n in self.history] == [2, 4, 6]
        assert "a" in self.counts and self.counts.get("a") == 1 and list(self.counts.items()) == [("a", 1)]
        assert 2 in self.seen and self.helper.scale == 2 and tuple(self.mask.shape) == (3,)
        assert self.clip(2.0) == 1.0  # the algorithm's own static method
        # Local state is made afresh each time train_step runs: fine.
        metrics, values = {}, []
        for _ in range(2):
            values.append(self.actor.explore(obs))
        metrics["loss"] = self.learner.learn(values, self.discount, self.limits[:4], self.config.hidden_sizes)
        return metrics


def trace_with(train_step: Callable[..., Any]) -> msrl.DataflowGraph:
    """Trace ``Algo`` with ``train_step`` in place of its own."""
    return msrl.trace(type("Custom", (Algo,), {"train_step": train_step})())


def marked_line(fn: Callable[..., Any]) -> int:
    """The line of ``fn`` (in its file) that carries the marker comment."""
    code = fn.__code__
    lines = linecache.getlines(code.co_filename)
    last = max(line for _, _, line in code.co_lines() if line is not None)
    hits = [n for n in range(code.co_firstlineno, last + 1) if MARKER in lines[n - 1]]
    assert len(hits) == 1, (fn.__name__, hits)
    return hits[0]


def site_of(fn: Callable[..., Any], line: int | None = None) -> str:
    """``file:line`` of ``fn``'s marked line (or of ``line`` in its file), as an error's site ends."""
    return f"{os.path.basename(fn.__code__.co_filename)}:{marked_line(fn) if line is None else line}"


def assert_hidden_state(info: Any, site: str, *words: str) -> None:
    exc = info.value
    assert type(exc) is msrl.HiddenStateError and isinstance(exc, msrl.TraceError), f"{type(exc).__name__}: {exc}"
    message = str(exc)
    for word in words:
        assert word in message, (word, message)
    assert "runs once, when msrl traces it" in message and "component" in message
    assert "\n" not in message
    assert exc.site is not None and exc.site.endswith(site), (exc.site, site)
    assert message.startswith(f"{exc.site}: ")
