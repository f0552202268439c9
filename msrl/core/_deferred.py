"""Values a component returns now but computes at the end of the iteration.

A learner's diagnostics (losses, KL, clip fraction of the updated policy) cost
a forward pass over the whole batch, yet nothing in the iteration waits for
them but the run's metrics.  Computed inside ``learn`` they sit between the
update and the weights the actors are waiting for; under a distributed policy
that is critical-path time (6% of a PPO update here).  Wrapped in ``deferred``
they are computed when the executor finishes the fragment's iteration, after
every value it sends to other fragments has gone out.  Anything that needs the
value sooner (another component call, an interface, pickling) computes it on
the spot, so a deferred value is never seen by user code unresolved.

    def learn(self, batch) -> Global:
        ...  # the update
        return msrl.deferred(self._diagnostics, batch)  # e.g. {"approx_kl": ...}

The function must read only state that nothing changes before the iteration
ends: in the single-learner loop, the learner's own network after its update.
Outside an executor's iteration (``train_step()`` called by hand, a unit test)
nothing would resolve it later, so ``deferred`` computes the value at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_STATE = threading.local()  # per thread: executors run a replica's components on one thread


@contextlib.contextmanager
def deferring() -> Iterator[None]:
    """While an executor runs an iteration on this thread, ``deferred`` values wait for its end."""
    depth = getattr(_STATE, "depth", 0)
    _STATE.depth = depth + 1
    try:
        yield
    finally:
        _STATE.depth = depth


_PENDING = object()


class Deferred:
    """``fn(*args, **kwargs)``, computed once, when first needed."""

    __slots__ = ("_fn", "_args", "_kwargs", "_value", "phase")

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if not callable(fn):
            raise TypeError(f"deferred needs a callable, got {type(fn).__name__}")
        self._fn: Callable[..., Any] | None = fn
        self._args: tuple[Any, ...] | None = args
        self._kwargs: dict[str, Any] | None = kwargs
        self._value: Any = _PENDING
        self.phase = "other"  # the executor sets the phase of the component that returned it, for timings

    @property
    def pending(self) -> bool:
        return self._value is _PENDING

    def resolve(self) -> Any:
        if self._value is _PENDING:
            fn, args, kwargs = self._fn, self._args or (), self._kwargs or {}
            self._fn = self._args = self._kwargs = None  # drop the batch it held as soon as it is used
            assert fn is not None  # set until the value is computed, and computed once
            self._value = fn(*args, **kwargs)
        return self._value

    def __reduce__(self) -> tuple:
        return _identity, (self.resolve(),)  # pickled as its value: another process never computes it

    def __repr__(self) -> str:
        state = "pending" if self._value is _PENDING else f"= {self._value!r}"
        return f"Deferred({state})"


def _identity(value: Any) -> Any:
    return value


def deferred(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` computed at the end of the fragment's iteration, or
    sooner if anything needs it; computed at once outside an executor.  See the
    module docstring for when to use it."""
    value = Deferred(fn, *args, **kwargs)
    return value if getattr(_STATE, "depth", 0) else value.resolve()


def resolve_deferred(value: Any) -> Any:
    """``value`` with every ``Deferred`` in it (at any depth of tuples, named tuples,
    lists and dicts) computed; containers without one come back as they are."""
    if type(value) is Deferred:
        return value.resolve()
    if isinstance(value, dict):
        items = {key: resolve_deferred(item) for key, item in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    if isinstance(value, (tuple, list)):
        resolved = [resolve_deferred(item) for item in value]
        if all(new is old for new, old in zip(resolved, value)):
            return value
        if isinstance(value, list):
            return resolved
        return type(value)._make(resolved) if hasattr(value, "_fields") else tuple(resolved)  # type: ignore[attr-defined]
    return value


def pending_deferred(value: Any) -> list[Deferred]:
    """The not yet computed ``Deferred`` values in ``value``'s tuples, lists and dicts."""
    if type(value) is Deferred:
        return [value] if value.pending else []
    if isinstance(value, (tuple, list)):
        return [d for item in value for d in pending_deferred(item)]
    if isinstance(value, dict):
        return [d for item in value.values() for d in pending_deferred(item)]
    return []


def has_deferred(value: Any) -> bool:
    """Whether ``value`` holds a ``Deferred`` anywhere in its tuples, lists and dicts.  Asked of
    every component call's result that another step reads (a rollout step's tensors, mostly), so
    the leaves of a tuple are looked at in place, not by a call each."""
    if type(value) is Deferred:
        return True
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list)):
        return False
    for item in value:
        if type(item) is Deferred or (isinstance(item, (tuple, list, dict)) and has_deferred(item)):
            return True
    return False
