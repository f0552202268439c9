"""Hidden state in ``train_step`` that the tracer sees only through the profiler: every torch
sampling function and method, the profiler installed before tracing (chained and restored), the
known gaps (kept as strict expected failures) and an array attribute passed to a component.  The
patterns refused by attribute are in test_trace_hidden_state.py."""

from __future__ import annotations

import random
import sys  # sys.setprofile: the tracer must chain to and restore a profiler installed before it

import numpy as np
import pytest
import torch
from hidden_state_support import GLOBAL_NP_RNG, TICKS, Algo, assert_hidden_state, site_of, trace_with

import msrl

# Every torch sampling function and in-place sampling method, called on its own line.
TORCH_DRAWS = [
    ("torch.rand", lambda t: torch.rand(3)),
    ("torch.randn", lambda t: torch.randn(3)),
    ("torch.randint", lambda t: torch.randint(5, (3,))),
    ("torch.randperm", lambda t: torch.randperm(3)),
    ("torch.rand_like", lambda t: torch.rand_like(t)),
    ("torch.randn_like", lambda t: torch.randn_like(t)),
    ("torch.randint_like", lambda t: torch.randint_like(t, 5)),
    ("torch.normal", lambda t: torch.normal(0.0, 1.0, (3,))),
    ("torch.bernoulli", lambda t: torch.bernoulli(t / 2)),
    ("torch.multinomial", lambda t: torch.multinomial(t, 1)),
    ("torch.poisson", lambda t: torch.poisson(t)),
    ("torch.Tensor.bernoulli", lambda t: t.bernoulli()),
    ("torch.Tensor.uniform_", lambda t: t.uniform_()),
    ("torch.Tensor.normal_", lambda t: t.normal_()),
    ("torch.Tensor.bernoulli_", lambda t: t.bernoulli_()),
    ("torch.Tensor.random_", lambda t: t.random_()),
    ("torch.Tensor.exponential_", lambda t: t.exponential_()),
    ("torch.Tensor.geometric_", lambda t: t.geometric_(0.5)),
    ("torch.Tensor.log_normal_", lambda t: t.log_normal_()),
    ("torch.Tensor.cauchy_", lambda t: t.cauchy_()),
]


@pytest.mark.parametrize("name, draw", TORCH_DRAWS, ids=[name for name, _ in TORCH_DRAWS])
def test_torch_draws_are_refused(name, draw):
    def train_step(self):
        obs = self.env.observe()
        draw(torch.ones(3))
        return obs

    with pytest.raises(msrl.TraceError) as info:
        trace_with(train_step)
    assert_hidden_state(info, site_of(draw, draw.__code__.co_firstlineno), f"with {name};")


# Not caught, kept here so that a fix shows up as an unexpected pass.  NumPy's samplers are
# Cython methods, which sys.setprofile does not report; a for loop advances its iterator in
# the interpreter without a call.  As attributes (self.np_rng, self.ticks) they are refused.
def _ts_numpy_legacy_draw(self):
    return np.random.rand()  # <- hidden


def _ts_numpy_global_generator(self):
    return GLOBAL_NP_RNG.random()  # <- hidden


def _ts_for_over_global_iterator(self):
    for _tick in TICKS:  # <- hidden
        break


@pytest.mark.xfail(strict=True, reason="invisible to sys.setprofile on CPython 3.11")
@pytest.mark.parametrize(
    "train_step", [_ts_numpy_legacy_draw, _ts_numpy_global_generator, _ts_for_over_global_iterator]
)
def test_known_gaps(train_step):
    with pytest.raises(msrl.TraceError) as info:
        trace_with(train_step)
    assert_hidden_state(info, site_of(train_step))


def _ts_random_random(self):
    if random.random() < 0.1:  # refused by the profile hook
        self.learner.sync_target()


def _ts_append(self):
    self.history.append(self.env.observe())  # refused by the frozen attribute


# -- the profiler installed before tracing ----------------------------------------------------------
def test_profiler_installed_before_is_chained_and_restored():
    before = sys.getprofile()
    calls = []

    def profiler(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profiler)
    try:
        msrl.trace(Algo())
        assert sys.getprofile() is profiler
        assert {"train_step", "rollout"} <= set(calls)  # it kept seeing calls while msrl traced
        # Refused by the profile hook (which Python then removes) and by a frozen attribute.
        for train_step in (_ts_random_random, _ts_append):
            with pytest.raises(msrl.TraceError):
                trace_with(train_step)
            assert sys.getprofile() is profiler
    finally:
        sys.setprofile(before)
    msrl.trace(Algo())
    assert sys.getprofile() is before


def _ts_array_argument(self):
    return self.actor.act(self.array)  # <- hidden


def test_an_array_attribute_passed_to_a_component_is_still_named_by_its_type():
    with pytest.raises(msrl.TraceError) as info:
        trace_with(_ts_array_argument)
    assert "an argument of type ndarray" in str(info.value)
    assert info.value.site.endswith(site_of(_ts_array_argument))
