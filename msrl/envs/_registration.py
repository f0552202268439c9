"""What one environment msrl builds in declares about itself, in its own folder.

Every environment lives in one folder, ``msrl/envs/<name>/``: its NumPy and torch
physics, its kernel source (a ``.cu`` data file that ``fragments`` builds; this
package never compiles or launches anything) and, in the folder's ``__init__``, its
``REGISTRATION``: one ``EnvRegistration`` saying its id, the class that joins its
backends (the class declares the spaces), which backends it has and where its kernel
source is.  ``msrl.envs._registry`` finds the folders and registers what they declare;
nothing outside the folder names the environment.

The folder's ``__init__`` stays light (no torch, no NumPy physics): the registry
imports every folder's ``__init__`` to read its ``REGISTRATION``, and the classes are
imported when an environment is first built.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msrl.core import import_object


@dataclass(frozen=True)
class Backend:
    """How to build one backend of one environment.  ``factory`` is a callable or
    ``"module:Name"`` taking ``num_envs=``, ``seed=`` and the environment's own
    keyword arguments.  What ``msrl.envs.make`` passes it from the fragment's
    ``EnvDefaults``: ``on_device`` factories take ``device=``; ``threaded`` ones
    ``threads=`` (their own threads); ``fallback`` ones ``fallback=`` (True where the
    executor prefers this backend: build NumPy instead where it cannot be built
    here).  ``shardable`` ones (host arrays whose step releases the GIL) ``make``
    splits across threads itself."""

    factory: str | Callable[..., Any]
    on_device: bool = False
    shardable: bool = False
    threaded: bool = False
    fallback: bool = False


def import_path(path: str) -> Any:
    """The object a ``"module:Name"`` string names, its module imported now."""
    return import_object(path, "environment factory")


@dataclass(frozen=True)
class Lazy:
    """A factory named ``"module:Name"`` with arguments bound: imports the module
    when first called, so registering a backend imports nothing."""

    path: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return import_path(self.path)(*self.args, *args, **dict(self.kwargs), **kwargs)


def lazy(path: str, *args: Any, **kwargs: Any) -> Lazy:
    """``path``'s callable with ``args`` and ``kwargs`` bound, imported when first called."""
    return Lazy(path, args, tuple(kwargs.items()))


PHYSICS_BACKENDS: dict[str, Callable[[str], Backend]] = {
    "numpy": lambda env: Backend(env, shardable=True),
    "torch": lambda env: Backend(lazy(env, backend="torch"), on_device=True),
}
"""How the environment class is built on each of its own physics: ``Class(num_envs, seed, **kwargs)``
on NumPy (shardable across threads), ``Class(..., backend="torch")`` on a torch device."""


@dataclass(frozen=True)
class EnvRegistration:
    """One environment msrl builds in: its entry in the registry, declared once, as
    ``REGISTRATION`` in its folder's ``__init__``.

    * ``env_id``: the name ``msrl.envs.make`` takes.
    * ``env``: ``"module:Class"`` of the ``BatchedEnv`` subclass that joins the backends'
      physics (``Class.physics``), declares the spaces and the time limit (what
      ``msrl.envs.spec`` reports) and, if it has kernels, their name prefix
      (``Class.kernel``) and compiled-in constants (``Class.kernel_defines``).
    * ``physics``: the backends the class steps itself (keys of ``PHYSICS_BACKENDS``).
    * ``kernel_source``: its CUDA C source, a file in the folder whose stem is
      ``Class.kernel``; None without kernels.  Every kernel backend a plug-in offers
      (``cuda``, ``cuda-emulated``, ``cpu-kernel`` from ``fragments``) builds it.
    * ``adapters``: further backends by name, built by something other than the class
      (gymnasium's or PettingZoo's original of the same environment).

    Example (``msrl/envs/pendulum/__init__.py``)::

        REGISTRATION = EnvRegistration(
            "Pendulum-v1",
            env="msrl.envs.pendulum._numpy:Pendulum",
            kernel_source=Path(__file__).with_name("pendulum.cu"),
            adapters={"gymnasium": Backend(lazy("msrl.envs._gymnasium:GymnasiumEnv", "Pendulum-v1"))},
        )
    """

    env_id: str
    env: str
    physics: tuple[str, ...] = ("numpy", "torch")
    kernel_source: Path | None = None
    adapters: Mapping[str, Backend] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [name for name in self.physics if name not in PHYSICS_BACKENDS]
        if unknown:
            raise ValueError(
                f"{self.env_id}: unknown physics backend {unknown[0]!r}; valid choices: {', '.join(PHYSICS_BACKENDS)}"
            )
        if self.kernel_source is not None and self.kernel_source.suffix != ".cu":
            raise ValueError(f"{self.env_id}: kernel_source must be a .cu file, got {self.kernel_source}")

    def backends(self) -> dict[str, Backend]:
        """The backends this registration declares (kernel backends come from plug-ins)."""
        own = {name: PHYSICS_BACKENDS[name](self.env) for name in self.physics}
        return {**own, **self.adapters}

    def env_class(self) -> type:
        """The environment class (its module imported now)."""
        cls: type = import_path(self.env)
        return cls

    @property
    def kernel(self) -> str | None:
        """The kernel source's name (its file's stem), which is also the class's ``kernel``."""
        return None if self.kernel_source is None else self.kernel_source.stem


@dataclass(frozen=True)
class EnvFamily:
    """Many environment ids of one backend, named by a pattern: a folder whose environments are
    the games of another package (``ALE/<Game>-v5``: every Atari 2600 ROM ale-py ships) declares
    this as its ``REGISTRATION`` instead of one ``EnvRegistration`` per id.

    * ``pattern``: a regular expression an id must match in full; its first group is the game.
    * ``backend``: the backend's name (``msrl.envs.backends`` lists it for a matching id).
    * ``env``: ``"module:Class"`` of the environment, called as ``Class(env_id, num_envs=, seed=,
      **kwargs)``; it raises ``ConfigError`` where its package is missing (naming the extra to
      install) or the game is unknown (naming close matches).
    * ``example``: an id, for the line that lists what msrl can make.
    * ``threaded``: the class takes ``threads=`` (its own threads, from the executor's defaults).
    """

    pattern: str
    backend: str
    env: str
    example: str
    threaded: bool = False

    def matches(self, env_id: str) -> bool:
        return isinstance(env_id, str) and re.fullmatch(self.pattern, env_id) is not None

    def factory(self, env_id: str) -> Backend:
        """The backend that builds ``env_id`` (which ``matches``)."""
        return Backend(lazy(self.env, env_id), threaded=self.threaded)


def public_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for an environment folder's ``__init__``: each of ``names``
    (name -> submodule) is imported from ``package.<submodule>`` when first read."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["Backend", "EnvFamily", "EnvRegistration", "Lazy", "PHYSICS_BACKENDS", "import_path", "lazy", "public_names"]
