"""Every ``TraceError`` points at the user's file and line, says how to fix what it refuses, and
leaves nothing behind (no tracer, no touched component).  The PPO graph itself, determinism and
equivalence with eager Python are in test_tracing.py."""

from __future__ import annotations

import copy
import gc
import inspect
import os
import sys
import sysconfig
import types

import numpy as np
import pytest
import torch

import msrl
import msrl.core
import msrl.envs
from algorithms.ppo import PPO, PPOConfig
from msrl.core import (
    ControlFlowError,
    HiddenStateError,
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


def _ts_numpy_call(self):
    obs = self.env.observe()
    action, logprob, value = self.actor.act(obs)
    reward = self.env.step(action)[1]
    return np.clip(reward, -1.0, 1.0)  # <- error


def _ts_numpy_reduction(self):
    return np.mean(self.env.observe())  # <- error


def _ts_torch_python_function(self):
    return torch.nn.functional.relu(self.env.observe())  # <- error


def _ts_stdlib_call(self):
    return copy.deepcopy(self.env.observe())  # <- error


def _marked_line(fn, marker: str = "# <- error") -> int:
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if marker in line]
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
    # Library code between the user's line and the traced value: the error names the user's line
    # and the library function called there, not the library's own lines.
    (_ts_numpy_call, UnsupportedOperationError, "fromnumeric.clip() computes with the traced value"),
    (_ts_numpy_reduction, UnsupportedOperationError, "fromnumeric.mean() computes with"),
    (_ts_torch_python_function, UnsupportedOperationError, "torch.nn.functional.relu() computes with"),
    (_ts_stdlib_call, UnsupportedOperationError, "copy.deepcopy() computes with"),
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


# -- unpacking a result whose method does not say it returns a tuple --------------------------------
class UnannotatedActor(msrl.Actor):
    """Returns three values from ``act`` without the ``-> tuple[...]`` that tells the tracer so."""

    def act(self, obs):  # <- annotate
        return obs, obs, obs

    def value(self, obs):
        return obs

    def set_weights(self, weights):
        pass


class UnannotatedLearner(msrl.Learner):
    def learn(self, batch):  # <- annotate
        return {}, {}

    def get_weights(self):
        return {}


class PPOWithUnannotatedActor(PPO):
    """PPO's own ``train_step`` (in algorithms/ppo.py) unpacks ``actor.act``: the method to fix is here."""

    def __init__(self, config, run):
        super().__init__(config, run)
        self.actor = UnannotatedActor()


def _ts_unpack_learn(self):
    metrics, extra = self.learner.learn(self.env.observe())  # <- unpacked
    return metrics


def test_unpacking_in_a_base_class_points_at_the_method_to_annotate():
    algorithm = PPOWithUnannotatedActor(
        PPOConfig(num_envs=2, num_steps=4, num_minibatches=2), msrl.RunInfo(seed=0, total_env_steps=64)
    )
    with pytest.raises(UnsupportedOperationError) as info:
        msrl.trace(algorithm)
    line = _marked_line(UnannotatedActor.act, "# <- annotate")
    assert info.value.site is not None and site_file_and_line(info.value.site) == (os.path.abspath(__file__), line)
    message = str(info.value)
    assert "annotate UnannotatedActor.act with -> tuple[Batched, Batched, Batched]" in message
    unpacked = inspect.getsourcelines(PPO.train_step)
    unpacked_at = unpacked[1] + next(i for i, text in enumerate(unpacked[0]) if "= self.actor.act(obs)" in text)
    assert f"{os.path.basename(inspect.getfile(PPO))}:{unpacked_at}" in message  # where it is unpacked


def test_unpacking_in_train_step_names_the_method_and_the_line_that_unpacks():
    cls = type("Custom", (PPO,), {"train_step": _ts_unpack_learn})
    algorithm = cls(PPOConfig(num_envs=2, num_steps=4, num_minibatches=2), msrl.RunInfo(seed=0, total_env_steps=64))
    algorithm.learner = UnannotatedLearner()
    with pytest.raises(UnsupportedOperationError) as info:
        msrl.trace(algorithm)
    line = _marked_line(UnannotatedLearner.learn, "# <- annotate")
    assert info.value.site is not None and site_file_and_line(info.value.site) == (os.path.abspath(__file__), line)
    assert "annotate UnannotatedLearner.learn with -> tuple[Global, Global]" in str(info.value)
    assert f"{THIS_FILE}:{_marked_line(_ts_unpack_learn, '# <- unpacked')}" in str(info.value)


def _ts_unpack_one_value(self):
    first, second = self.env.observe()  # <- error
    return first


def test_unpacking_a_result_msrl_declares_as_one_value_stays_at_the_users_line():
    # env.observe is msrl's own, annotated -> Batched: the unpacking is what is wrong.
    with pytest.raises(UnsupportedOperationError) as info:
        _trace_with(_ts_unpack_one_value)
    assert info.value.site is not None
    assert site_file_and_line(info.value.site) == (os.path.abspath(__file__), _marked_line(_ts_unpack_one_value))
    assert "returns one value" in str(info.value) and "observe" in str(info.value)


# -- an algorithm installed as a package is still the user's code ------------------------------------
_INSTALLED_SOURCE = """
import random

import numpy as np

from algorithms.ppo import PPO


class Installed(PPO):
    def train_step(self):
        return self.clipped(self.env.observe())

    def clipped(self, obs):
        return np.clip(obs, 0.0, 1.0)  # line 14


class InstalledDraw(PPO):
    def train_step(self):
        self.env.observe()
        return random.random()  # line 20
"""


@pytest.fixture
def installed_module():
    """The algorithms above as if installed: their file is in site-packages, among the libraries."""
    path = os.path.join(sysconfig.get_paths()["purelib"], "installed_algorithms", "algo.py")
    module = types.ModuleType("installed_algorithms.algo")
    exec(compile(_INSTALLED_SOURCE, path, "exec"), module.__dict__)
    return path, module


@pytest.mark.parametrize(
    "name, error, line", [("Installed", UnsupportedOperationError, 14), ("InstalledDraw", HiddenStateError, 20)]
)
def test_an_installed_algorithms_own_lines_are_the_users(installed_module, name, error, line):
    path, module = installed_module
    cls = getattr(module, name)
    with pytest.raises(error) as info:
        msrl.trace(cls(PPOConfig(num_envs=2, num_steps=4, num_minibatches=2), msrl.RunInfo(seed=0, total_env_steps=64)))
    assert info.value.site is not None and site_file_and_line(info.value.site) == (path, line)


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
