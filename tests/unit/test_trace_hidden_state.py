"""Hidden state in ``train_step``: Python there runs once, when msrl traces it; only
component calls run every iteration.  So state kept outside components (a counter
advanced by ``next()``, a list appended to, a random draw, a method call on a
non-component attribute) would be frozen at its first value.  The tracer refuses it
with a ``HiddenStateError`` at the user's line; plain data, helper methods and local
variables keep working.

The components below are stand-ins: the tracer never runs their methods.
"""

from __future__ import annotations

import itertools
import random
import sys  # sys.setprofile: the tracer must chain to and restore a profiler installed before it

import numpy as np
import pytest
import torch
from hidden_state_support import GLOBAL_RNG, TICKS, Algo, assert_hidden_state, site_of, trace_with

import msrl


# -- what keeps working ------------------------------------------------------------------------------
def test_plain_data_helpers_and_locals_trace():
    graph = msrl.trace(Algo())
    assert [n.name for n in graph.nodes] == [
        "env.observe",
        "actor.act",
        "env.step",
        "actor.explore",
        "actor.explore_1",
        "learner.learn",
        "output",
    ]
    assert graph.regions["loop0"].trip_count == 3  # msrl.steps(self.config.num_steps)
    values, gamma, limits, sizes = graph.node("learner.learn").args
    assert len(values) == 2 and gamma == 0.99 and limits == (1, 2.5, "x", None) and sizes == [64, 64]
    assert type(sizes) is list  # the frozen copy does not leak into the graph


def _ts_components_only(self):
    return self.learner.learn(self.actor.act(self.env.observe()), 0.5, (), [])


def test_untouched_attributes_of_any_kind_do_not_matter():
    graph = trace_with(_ts_components_only)
    assert [n.name for n in graph.nodes] == ["env.observe", "actor.act", "learner.learn", "output"]


def test_components_still_run_their_draws_eagerly_after_tracing():
    algo = Algo()
    msrl.trace(algo)
    assert 1.0 <= algo.actor.explore(1.0) < 2.0
    assert next(algo.ticks) == 0 and algo.history == [1, 2, 3] and algo.counts == {"a": 1}  # tracing changed nothing


# -- what is refused: one case per pattern, each with the line it must point at ----------------------
def _jitter():
    return random.gauss(0.0, 1.0)  # <- hidden


def _closure_next():
    ticks = itertools.count()

    def _ts_closure_next(self):
        obs = self.env.observe()
        if next(ticks) % 4 == 0:  # <- hidden
            self.learner.sync_target()
        return obs

    return _ts_closure_next


def _ts_issue_example(self):
    obs = self.env.observe()
    if next(self.ticks) % 4 == 0:  # <- hidden
        self.learner.sync_target()
    return self.actor.act(obs)


def _ts_for_over_iterator(self):
    for _tick in self.ticks:  # <- hidden
        break


def _ts_dunder_next(self):
    self.ticks.__next__()  # <- hidden


def _ts_global_next(self):
    if next(TICKS) % 4 == 0:  # <- hidden
        self.learner.sync_target()


def _ts_append(self):
    self.history.append(self.env.observe())  # <- hidden


def _ts_extend(self):
    self.history.extend([4])  # <- hidden


def _ts_insert(self):
    self.history.insert(0, 4)  # <- hidden


def _ts_pop(self):
    self.history.pop()  # <- hidden


def _ts_remove(self):
    self.history.remove(1)  # <- hidden


def _ts_clear(self):
    self.history.clear()  # <- hidden


def _ts_sort(self):
    self.history.sort()  # <- hidden


def _ts_iadd(self):
    self.history += [4]  # <- hidden


def _ts_alias_append(self):
    history = self.history
    history.append(4)  # <- hidden


def _ts_iterated_item_append(self):
    for row in self.rows:
        row.append(0)  # <- hidden


def _ts_setitem(self):
    self.counts["b"] = 2  # <- hidden


def _ts_setitem_augmented(self):
    self.counts["a"] += 1  # <- hidden


def _ts_delitem(self):
    del self.counts["a"]  # <- hidden


def _ts_update(self):
    self.counts.update(b=2)  # <- hidden


def _ts_setdefault(self):
    self.counts.setdefault("b", 0)  # <- hidden


def _ts_set_add(self):
    self.seen.add(3)  # <- hidden


def _ts_set_discard(self):
    self.seen.discard(1)  # <- hidden


def _ts_set_ior(self):
    self.seen |= {3}  # <- hidden


def _ts_nested_list(self):
    self.config.hidden_sizes.append(32)  # <- hidden


def _ts_set_config_field(self):
    self.config.num_steps = 5  # <- hidden


def _ts_helper_method(self):
    return self.helper.compute()  # <- hidden


def _ts_callable_attribute(self):
    return self.learner.learn((), self.schedule(3), (), [])  # <- hidden


def _ts_rng_attribute(self):
    return self.rng.random()  # <- hidden


def _ts_numpy_rng_attribute(self):
    return self.np_rng.random()  # <- hidden


def _ts_config_method(self):
    self.config.validate()  # <- hidden


def _ts_module_attribute(self):
    return self.net(torch.ones(2))  # <- hidden


def _ts_tensor_times(self):
    return self.mask * 2  # <- hidden


def _ts_tensor_rtimes(self):
    return 2 * self.mask  # <- hidden


def _ts_tensor_method(self):
    return self.mask.sum()  # <- hidden


def _ts_torch_function(self):
    return torch.sum(self.mask)  # <- hidden


def _ts_tensor_truth(self):
    if self.mask.any():  # <- hidden
        self.learner.sync_target()


def _ts_tensor_bool(self):
    if self.mask:  # <- hidden
        self.learner.sync_target()


def _ts_tensor_setitem(self):
    self.mask[0] = 2.0  # <- hidden


def _ts_array_plus(self):
    return self.array + 1  # <- hidden


def _ts_numpy_function(self):
    return np.sum(self.array)  # <- hidden


def _ts_random_random(self):
    if random.random() < 0.1:  # <- hidden
        self.learner.sync_target()


def _ts_random_randint(self):
    return random.randint(0, 3)  # <- hidden


def _ts_random_choice(self):
    return random.choice(["a", "b"])  # <- hidden


def _ts_random_shuffle(self):
    order = [1, 2, 3]
    random.shuffle(order)  # <- hidden


def _ts_local_random_instance(self):
    rng = random.Random(0)
    return rng.random()  # <- hidden


def _ts_global_random_instance(self):
    return GLOBAL_RNG.uniform(0.0, 1.0)  # <- hidden


def _ts_torch_init(self):
    weight = torch.empty(2, 2)
    torch.nn.init.uniform_(weight)  # <- hidden


def _ts_torch_distribution(self):
    return torch.distributions.Normal(0.0, 1.0).sample()  # <- hidden


def _ts_helper_function_draw(self):
    return _jitter()


def _ts_helper_method_draw(self):
    return self.noisy_rollout(self.env.observe())


def case(train_step, *words: str, at=None):
    """``train_step`` must raise HiddenStateError naming ``words`` at the marked line of ``at`` (default: itself)."""
    return pytest.param(train_step, words, at or train_step, id=train_step.__name__.removeprefix("_ts_"))


HIDDEN_STATE_CASES = [
    # Counters: advancing an iterator.
    case(_ts_issue_example, "self.ticks", "iterator", "keep the counter in a component"),
    case(_ts_for_over_iterator, "self.ticks", "iterator"),
    case(_ts_dunder_next, "self.ticks", "iterator"),
    case(_ts_global_next, "module-level iterator TICKS", "next()"),
    case(_closure_next(), "closure iterator ticks", "next()"),
    # Changing a container or an object stored on the algorithm.
    case(_ts_append, "self.history.append()", "type list"),
    case(_ts_extend, "self.history.extend()"),
    case(_ts_insert, "self.history.insert()"),
    case(_ts_pop, "self.history.pop()"),
    case(_ts_remove, "self.history.remove()"),
    case(_ts_clear, "self.history.clear()"),
    case(_ts_sort, "self.history.sort()"),
    case(_ts_iadd, "self.history += ..."),
    case(_ts_alias_append, "self.history.append()"),
    case(_ts_iterated_item_append, "self.rows[0].append()"),
    case(_ts_setitem, "self.counts[...] = ...", "type dict"),
    case(_ts_setitem_augmented, "self.counts[...] = ..."),
    case(_ts_delitem, "del self.counts[...]"),
    case(_ts_update, "self.counts.update()"),
    case(_ts_setdefault, "self.counts.setdefault()"),
    case(_ts_set_add, "self.seen.add()", "type set"),
    case(_ts_set_discard, "self.seen.discard()"),
    case(_ts_set_ior, "self.seen |= ..."),
    case(_ts_nested_list, "self.config.hidden_sizes.append()"),
    case(_ts_set_config_field, "self.config.num_steps = ...", "type Config"),
    # Calling a non-component attribute or one of its methods.
    case(_ts_helper_method, "self.helper.compute()", "not a component method"),
    case(_ts_callable_attribute, "self.schedule()"),
    case(_ts_rng_attribute, "self.rng.random()"),
    case(_ts_numpy_rng_attribute, "self.np_rng.random()"),
    case(_ts_config_method, "self.config.validate()"),
    case(_ts_module_attribute, "self.net()"),
    # Computing with a tensor or array stored on the algorithm.
    case(_ts_tensor_times, "computes with self.mask, a value of type Tensor"),
    case(_ts_tensor_rtimes, "computes with self.mask"),
    case(_ts_tensor_method, "self.mask.sum()"),
    case(_ts_torch_function, "computes with self.mask"),
    case(_ts_tensor_truth, "self.mask.any()"),
    case(_ts_tensor_bool, "computes with self.mask"),
    case(_ts_tensor_setitem, "self.mask[...] = ..."),
    case(_ts_array_plus, "computes with self.array", "ndarray"),
    case(_ts_numpy_function, "computes with self.array, a value of type ndarray"),
    # Random draws, wherever the generator lives, also below library code and in helpers.
    case(_ts_random_random, "random.Random.random", "draw random numbers inside a component method"),
    case(_ts_random_randint, "random.Random.randint"),
    case(_ts_random_choice, "random.Random.choice"),
    case(_ts_random_shuffle, "random.Random.shuffle"),
    case(_ts_local_random_instance, "random.Random.random"),
    case(_ts_global_random_instance, "random.Random.uniform"),
    case(_ts_torch_init, "torch.nn.init.uniform_"),
    case(_ts_torch_distribution, "torch.distributions.normal.Normal.sample"),
    case(_ts_helper_function_draw, "random.Random.gauss", at=_jitter),
    case(_ts_helper_method_draw, "random.Random.random", at=Algo.noisy_rollout),
]


@pytest.mark.parametrize("train_step, words, at", HIDDEN_STATE_CASES)
def test_hidden_state_is_refused_at_the_users_line(train_step, words, at):
    before = sys.getprofile()
    with pytest.raises(msrl.TraceError) as info:
        trace_with(train_step)
    assert_hidden_state(info, site_of(at), *words)
    assert sys.getprofile() is before  # the draw check is gone, even after an error
    assert list(msrl.steps(2)) == [0, 1]  # and no tracer is left active
