"""``msrl.deferred``: values computed at the end of a fragment's iteration, after
its sends, or as soon as anything else needs them."""

from __future__ import annotations

import pickle
from typing import NamedTuple

import pytest

import msrl
from msrl.core import deferring, has_deferred, resolve_deferred


class Pair(NamedTuple):
    a: object
    b: object


def test_outside_an_executor_it_is_computed_at_once():
    """``train_step()`` called by hand returns plain metrics, as before."""
    assert msrl.deferred(lambda x: {"loss": x}, 2) == {"loss": 2}


def test_computed_once_and_only_when_needed():
    calls = []
    with deferring():
        value = msrl.deferred(lambda x: calls.append(x) or {"loss": x}, 3)
    assert calls == []
    assert value.resolve() == {"loss": 3}
    assert value.resolve() == {"loss": 3}
    assert calls == [3]


def test_resolve_keeps_containers_and_their_types():
    batch = Pair(1, 2)
    assert resolve_deferred(batch) is batch  # nothing deferred: the very same object
    with deferring():
        tree = {"x": [msrl.deferred(lambda: 5), Pair(msrl.deferred(lambda: 6), 7)], "y": batch}
    assert has_deferred(tree) and not has_deferred(batch)
    assert has_deferred((1, (2, [3, {"a": tree["x"][0]}]))) and not has_deferred((1, (2, [3, {"a": 4}])))
    out = resolve_deferred(tree)
    assert out == {"x": [5, Pair(6, 7)], "y": batch}
    assert type(out["x"][1]) is Pair and out["y"] is batch


def test_pickles_as_its_value():
    with deferring():
        value = msrl.deferred(dict, kl=0.01)
    assert pickle.loads(pickle.dumps(value)) == {"kl": 0.01}


def test_rejects_a_non_callable():
    with pytest.raises(TypeError, match="callable"):
        msrl.deferred(42)


def test_pending_lists_only_what_is_left_to_compute():
    with deferring():
        first, second = msrl.deferred(lambda: 1), msrl.deferred(lambda: 2)
    tree = {"a": first, "b": (second, 3)}
    from msrl.core import pending_deferred

    assert pending_deferred(tree) == [first, second]
    first.resolve()
    assert pending_deferred(tree) == [second]
