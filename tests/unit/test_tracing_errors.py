"""Every ``TraceError`` points at the user's file and line, says how to fix what it refuses, and
leaves nothing behind (no tracer, no touched component).  The PPO graph itself, determinism and
equivalence with eager Python are in test_tracing.py."""

from __future__ import annotations

import gc
import inspect
import os
import sys

import numpy as np
import pytest

import msrl
import msrl.core
import msrl.envs
from algorithms.ppo import PPO, PPOConfig
from msrl.core import (
    ControlFlowError,
    TraceError,
    UndeclaredComponentError,
    UnsupportedOperationError,
)

THIS_FILE = os.path.basename(__file__)


def site_file_and_line(site: str) -> tuple[str, int]:
    path, _, line = site.rpartition(":")
    return os.path.abspath(path), int(line)


# -- TraceErrors point at the user's file and line ---------------------------------------------------
_GLOBAL_ENV = msrl.envs.make("CartPole-v1", 2, seed=0)


def _ts_if(self):
    obs = self.env.observe()
    if obs:  # <- error
        pass


def _ts_arith(self):
    obs = self.env.observe()
    return obs * 2.0  # <- error


def _ts_undeclared(self):
    obs = self.env.observe()
    return _GLOBAL_ENV.step(self.actor.act(obs)[0])  # <- error


def _ts_non_static_bound(self):
    n = self.env.observe()
    for _ in msrl.steps(n):  # <- error
        pass


def _ts_nested(self):
    obs = self.env.observe()
    for _ in msrl.steps(2):
        for _ in msrl.steps(3):  # <- error
            obs = self.env.step(self.actor.act(obs)[0])[0]


def _ts_break(self):
    obs = self.env.observe()
    for _ in msrl.steps(4):  # <- error
        obs = self.env.step(self.actor.act(obs)[0])[0]
        break


def _ts_numpy_arg(self):
    self.env.observe()
    return self.actor.act(np.zeros((2, 4), np.float32))  # <- error


def _ts_different_calls(self):
    obs = self.env.observe()
    for i in msrl.steps(4):  # <- error
        if i == 0:
            self.actor.act(obs)
        else:
            self.actor.value(obs)


def _ts_assign(self):
    obs = self.env.observe()
    self.last_obs = obs  # <- error


def _ts_control_flow_in_loop(self):
    obs = self.env.observe()
    for _ in msrl.steps(4):
        action, logprob, value = self.actor.act(obs)
        if value:  # <- error
            pass


def _marked_line(fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if "# <- error" in line]
    assert len(hits) == 1
    return hits[0]


def _trace_with(train_step):
    cls = type("Custom", (PPO,), {"train_step": train_step})
    return msrl.trace(
        cls(PPOConfig(num_envs=2, num_steps=4, num_minibatches=2), msrl.RunInfo(seed=0, total_env_steps=64))
    )


ERROR_CASES = [
    (_ts_if, ControlFlowError, "control flow"),
    (_ts_arith, UnsupportedOperationError, "outside a component"),
    (_ts_undeclared, UndeclaredComponentError, "does not declare"),
    (_ts_non_static_bound, ControlFlowError, "static"),
    (_ts_nested, TraceError, "nested"),
    (_ts_break, TraceError, "msrl.steps()"),
    (_ts_numpy_arg, UnsupportedOperationError, "ndarray"),
    (_ts_different_calls, TraceError, "different component calls"),
    (_ts_assign, UnsupportedOperationError, "self.last_obs"),
    (_ts_control_flow_in_loop, ControlFlowError, "control flow"),
]


@pytest.mark.parametrize("train_step, error, words", ERROR_CASES, ids=[c[0].__name__[4:] for c in ERROR_CASES])
def test_trace_error_names_user_line(train_step, error, words):
    global_state = _GLOBAL_ENV.get_state().copy()
    with pytest.raises(TraceError) as info:
        _trace_with(train_step)
    exc = info.value
    assert type(exc) is error, f"{type(exc).__name__}: {exc}"
    line = _marked_line(train_step)
    assert f"{THIS_FILE}:{line}: " in str(exc)
    assert exc.site is not None and site_file_and_line(exc.site) == (os.path.abspath(__file__), line)
    assert words in str(exc)
    # A failed trace leaves no tracer behind (steps is range again, an undeclared component
    # runs normally), and touches no real component.
    assert list(msrl.steps(2)) == [0, 1]
    np.testing.assert_array_equal(_GLOBAL_ENV.get_state(), global_state)
    _GLOBAL_ENV.observe()


def test_control_flow_error_says_where_the_value_was_made():
    with pytest.raises(ControlFlowError) as info:
        _trace_with(_ts_if)
    made_at = _marked_line(_ts_if) - 1
    assert "'env.observe' (output 0, made at " in str(info.value)
    assert f"{THIS_FILE}:{made_at})" in str(info.value)


def _ts_break_after_calls(self):
    obs = self.env.observe()
    for i in msrl.steps(4):  # <- error
        obs = self.env.step(self.actor.act(obs)[0])[0]
        if i == 1:
            break
    return self.actor.value(obs)


def test_break_in_a_later_iteration_is_rejected():
    # Eagerly this loop runs 2 iterations, so a graph with trip count 4 would be
    # wrong: tracing must refuse it ("break or return ... not supported").
    with pytest.raises(TraceError) as info:
        _trace_with(_ts_break_after_calls)
    assert "break" in str(info.value)
    assert f"{THIS_FILE}:{_marked_line(_ts_break_after_calls)}: " in str(info.value)


def test_error_inside_a_loop_reports_only_that_error(monkeypatch):
    # The user's error must be the only one: no second, unraisable "break or
    # return" TraceError printed when the loop generator is dropped.
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(ControlFlowError):
        _trace_with(_ts_control_flow_in_loop)
    gc.collect()
    assert [str(u.exc_value) for u in unraisable] == []
