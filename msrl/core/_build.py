"""Building an algorithm for one place in a run.

msrl, not the algorithm, decides how work is split between the copies
(replicas) of a fragment.  Three pieces make that possible:

* **Per-run quantities.**  A config field made with ``msrl.split(default)``
  counts something for the whole run (environments, replay capacity, a
  sampled batch, warm-up steps).  Each copy of a fragment is built with its
  share: ``share(config, copies)`` divides every such field, and refuses
  numbers that do not divide.  The algorithm states the number once and never
  sees how many copies there are.
* **Build plans.**  ``building(only=...)`` runs an algorithm's
  ``__init__`` so that only the named components are constructed.  Any other
  component constructed meanwhile becomes a ``Declared`` record (its class and
  how to build it), which is all tracing needs.  A fragment's worker therefore
  builds its own components and nothing else.
* **Environment defaults.**  The executor that will run a fragment says which
  environment backend, device and threads suit it (``EnvDefaults``); the
  builder hands them to the algorithm as ``RunInfo.env_defaults``, and the
  algorithm passes them to ``msrl.envs.make(..., defaults=run.env_defaults)``:
  parameters all the way, no state read from the surroundings.

Example::

    @dataclass
    class Config:
        num_envs: int = msrl.split(64)   # the run's total; each copy of a fragment gets its share
        num_steps: int = 32              # the same in every copy

    share(Config(), 2).num_envs  # 32
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from msrl.core._errors import BuildError, ConfigError

SPLIT = "msrl.split"
"""Field metadata key marking a per-run quantity."""


def split(default: Any = dataclasses.MISSING, **field_kwargs: Any) -> Any:
    """A config field holding a per-run quantity that the copies of a fragment share.

    ``num_envs: int = msrl.split(64)`` means 64 environments in the whole run: a
    fragment with two copies builds each with 32, a single-copy fragment with 64.
    Use it for every count that adds up across copies (environments, replay
    capacity, sampled batch, warm-up steps); leave counts that each copy repeats
    (rollout length, epochs, number of minibatches) as plain fields.  The value
    must be an integer that every fragment's copy count divides."""
    metadata = {**field_kwargs.pop("metadata", {}), SPLIT: True}
    return dataclasses.field(default=default, metadata=metadata, **field_kwargs)


def split_fields(config: Any) -> list[str]:
    """Names of the per-run quantities of a config dataclass (instance or class)."""
    if not dataclasses.is_dataclass(config):
        return []
    return [f.name for f in dataclasses.fields(config) if f.metadata.get(SPLIT)]


def share(config: Any, copies: int, where: str = "") -> Any:
    """``config`` with every per-run quantity divided among ``copies`` copies.

    ``where`` names the copies in the error (``"the 3 copies of fragment 'rollout'"``).
    With one copy the config itself comes back."""
    if copies == 1:
        return config
    changes = {}
    for name in split_fields(config):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"algo.{name} is a per-run quantity (msrl.split) and must be an integer, got {value!r}")
        if value % copies:
            raise ConfigError(
                f"algo.{name} ({value}) must be divisible by {where or f'{copies} copies'}: "
                f"each replica gets an equal share; valid values are multiples of {copies}"
            )
        changes[name] = value // copies
    return dataclasses.replace(config, **changes) if changes else config


@dataclass(frozen=True)
class EnvDefaults:
    """How the environments of a fragment should be built, as its executor prefers:
    the first of ``backends`` that an environment has (else its default backend), on
    ``device`` (None: the backend's own default, the GPU for ``cuda`` and the CPU for
    ``torch``), stepped with up to ``threads`` CPU threads.  A fragment's copy receives
    them in ``RunInfo.env_defaults`` and passes them to ``msrl.envs.make``."""

    backends: tuple[str, ...] = ()
    device: str | None = None
    threads: int = 1


@dataclass(frozen=True)
class _Plan:
    only: frozenset[str] | None


_STATE = threading.local()


def _plans() -> list[_Plan]:
    if not hasattr(_STATE, "plans"):
        _STATE.plans, _STATE.suspended = [], 0
    return _STATE.plans


@contextlib.contextmanager
def building(only: set[str] | frozenset[str] | None = None) -> Iterator[None]:
    """While active, an ``Algorithm`` constructs only the components named in ``only``
    (all of them when ``None``); any other component constructed in ``__init__`` is
    ``Declared``."""
    plans = _plans()
    plans.append(_Plan(None if only is None else frozenset(only)))
    try:
        yield
    finally:
        plans.pop()


def declaring() -> bool:
    """Whether a component constructed now should be declared instead of built."""
    plans = _plans()
    return bool(plans) and plans[-1].only is not None and not _STATE.suspended


def wanted(name: str) -> bool:
    """Whether the active plan builds the component assigned as ``name``."""
    plans = _plans()
    return not plans or plans[-1].only is None or name in plans[-1].only


@contextlib.contextmanager
def constructing() -> Iterator[None]:
    """Really construct components (a wanted one, and whatever its constructor builds)."""
    _plans()
    _STATE.suspended += 1
    try:
        yield
    finally:
        _STATE.suspended -= 1


class Declared:
    """A component constructed while msrl built another part of the run: its class
    and how to build it, but no object.  Tracing needs only the class.

    Environments made through ``msrl.envs.make`` also know their ``spec`` (id,
    backend, spaces) and ``num_envs``, so ``__init__`` may read spaces off them.
    Anything else read from a declared component is a ``BuildError`` that says why."""

    def __init__(self, cls: type, build: Callable[[], Any], **known: Any) -> None:
        object.__setattr__(self, "cls", cls)
        object.__setattr__(self, "_build", build)
        object.__setattr__(self, "_known", dict(known))

    def build(self) -> Any:
        with constructing():
            return self._build()

    def __getattr__(self, name: str) -> Any:
        known = object.__getattribute__(self, "_known")
        if name in known:
            return known[name]
        if name.startswith("__"):  # protocols probed by copy, pickle, hasattr: plainly absent
            raise AttributeError(name)
        raise BuildError(
            f"{self.cls.__name__}.{name} was read while msrl built another fragment, where this "
            f"component is declared but not constructed; an algorithm's __init__ should only construct "
            f"components and assign them (read an environment's spaces from msrl.envs.spec(env_id))"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        self._known[name] = value

    def __repr__(self) -> str:
        return f"Declared({self.cls.__name__})"


def component_class(component: Any) -> type:
    """The class of a component, built or declared."""
    return component.cls if isinstance(component, Declared) else type(component)
