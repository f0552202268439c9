"""The env registry: one table, environment id and backend name -> how to build it.

Declared here and read by everyone (``make``, ``spec``, ``backends``, the
plug-ins' ``register`` calls): adding a backend touches this one table.  The
environments msrl builds in each live in a folder of this package and declare
themselves there (``REGISTRATION``, an ``EnvRegistration``): this module finds the
folders when it is imported and registers what they declare, by ``"module:Name"``
strings, so registering imports no environment's physics.  Backends that live in
other packages (the kernel ones, in ``fragments``) are plug-ins under the
``msrl.env_backends`` entry point; they are loaded the first time a lookup needs them.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from msrl.core import ConfigError, Declared, EnvDefaults, Space, component_class, constructing
from msrl.envs._registration import Backend, EnvFamily, EnvRegistration, Lazy, import_path
from msrl.envs._sharded import ShardedEnv

PLUGIN_GROUP = "msrl.env_backends"
MIN_ENVS_PER_SHARD = 16384
"""Fewest environments per thread worth a shard: measured on 2 CPUs, two shards lose below 16k
environments, tie at 16k and win 1.5x at 65k (BENCHMARKS.md)."""


@dataclass(frozen=True)
class EnvSpec:
    """What ``make`` was called with, so an environment can be rebuilt with another
    batch size, seed or backend (evaluation, shards), plus its spaces.

    ``reward_threshold`` is the episode return at which the environment counts as
    solved, as the environment states it: gymnasium's registry value for an id made
    through gymnasium; for msrl's own ids the environment class's
    ``reward_threshold`` (gymnasium's value for the ids gymnasium also has:
    CartPole-v1 475, Pendulum-v1 none), None where there is none (Tag-v0,
    simple_spread_v3, PettingZoo modules)."""

    env_id: str
    backend: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    observation_space: Space | None = None
    action_space: Space | None = None
    num_agents: int = 1
    groups: Any = None
    """Group name -> ``msrl.AgentGroup`` for a multi-agent environment, else None."""
    reward_threshold: float | None = None
    frame_stack: int = 0
    """Where each observation is the last ``frame_stack`` frames of one episode along its first
    axis (Atari's 4-frame stack), that count, so a replay can store each frame once; else 0."""


REGISTRY: dict[tuple[str, str], Backend] = {}
"""(env id, backend name) -> ``Backend``: every backend msrl knows by name."""
_DEFAULT_BACKENDS = ("numpy", "gymnasium")


def register(
    env_id: str,
    backend: str,
    factory: str | Callable[..., Any],
    *,
    on_device: bool = False,
    shardable: bool = False,
    threaded: bool = False,
    fallback: bool = False,
) -> None:
    """Register ``factory(num_envs=, seed=, **kwargs)`` as ``backend`` of ``env_id``
    (the flags: ``Backend``'s).

    A user's own environment (a subclass of ``msrl.Environment``; see the README's
    "Your own environment") needs one call: ``msrl.envs.register("MyEnv-v0", "numpy", MyEnv)``.
    Registering an id that gymnasium also knows makes msrl's version win."""
    if not isinstance(env_id, str) or not env_id or not isinstance(backend, str) or not backend:
        raise ConfigError(f"register needs a non-empty env id and backend name, got {env_id!r}, {backend!r}")
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        raise ConfigError(f"register needs a callable or 'module:Name' factory for {env_id!r}, got {factory!r}")
    REGISTRY[(env_id, backend)] = Backend(factory, on_device, shardable, threaded, fallback)


@functools.lru_cache(maxsize=1)
def _load_plugins() -> None:
    """Call every ``msrl.env_backends`` entry point once (they register their backends)."""
    for entry in metadata.entry_points(group=PLUGIN_GROUP):
        entry.load()(register)


def env_ids() -> list[str]:
    """The ids msrl builds in (gymnasium's are available beside them)."""
    _load_plugins()
    return sorted({env_id for env_id, _ in REGISTRY})


def _family(env_id: str) -> EnvFamily | None:
    """The family whose pattern ``env_id`` matches (``ALE/Pong-v5``: Atari), else None."""
    return next((family for family in _FAMILIES if family.matches(env_id)), None)


def backends(env_id: str) -> list[str]:
    """The backends of ``env_id``: msrl's own (one id, or a family's pattern), or ``["gymnasium"]``
    for an id only gymnasium knows."""
    _load_plugins()
    own = sorted(backend for eid, backend in REGISTRY if eid == env_id)
    if own:
        return own
    family = _family(env_id)
    if family is not None:
        return [family.backend]
    if isinstance(env_id, str) and env_id.startswith("pettingzoo:"):
        return ["pettingzoo"]  # the module is imported, and checked, when the environment is made
    from msrl.envs import _gymnasium  # imported on first use: it pulls in torch and gymnasium

    return ["gymnasium"] if _gymnasium.knows(env_id) else []


def _choose_backend(env_id: str, available: list[str], backend: str | None, defaults: EnvDefaults) -> str:
    if backend is not None:
        if backend not in available:
            raise ConfigError(
                f"environment {env_id!r} has no {backend!r} backend; valid choices: {', '.join(available)}"
            )
        return backend
    for preferred in defaults.backends + _DEFAULT_BACKENDS:
        if preferred in available:
            return preferred
    return available[0]


def _unknown(env_id: str) -> ConfigError:
    from msrl.envs import _gymnasium

    ids = list(dict.fromkeys(env_ids() + _gymnasium.ids()))  # msrl's first, each once
    close = difflib.get_close_matches(env_id, ids, n=5, cutoff=0.6)
    families = "".join(f", {family.example}" for family in _FAMILIES)
    own = f"msrl's own: {', '.join(env_ids())}{families}; or any gymnasium id"
    hint = f"close matches: {', '.join(close)}" if close else own
    return ConfigError(f"unknown environment {env_id!r}; {hint}")


_INTERNAL_KEYWORDS = frozenset(
    {"num_envs", "seed", "backend", "device", "dtype", "validate", "kernels", "threads", "fallback"}
)
"""A backend's constructor arguments that msrl passes itself, not an environment's keywords."""


def _keywords(factory: Callable[..., Any]) -> list[str]:
    """The keywords a user may give ``factory`` (its constructor's, less msrl's own and those a
    registration binds)."""
    bound: set[str] = set()
    if isinstance(factory, Lazy):
        bound, factory = {k for k, _ in factory.kwargs}, import_path(factory.path)
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return []
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in named and p.name not in _INTERNAL_KEYWORDS | bound]


def _construct(env_id: str, factory: Callable[..., Any], **kwargs: Any) -> Any:
    """``factory(**kwargs)``, a keyword the environment does not take refused in one line."""
    try:
        return factory(**kwargs)
    except TypeError as error:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if unknown is None or unknown.group(1) in _INTERNAL_KEYWORDS:
            raise
        valid = _keywords(factory)
        raise ConfigError(
            f"{env_id} takes no keyword {unknown.group(1)!r}; its keywords: {', '.join(valid) if valid else 'none'}"
        ) from None


def _factory(env_id: str, backend: str) -> tuple[Callable[..., Any], Backend]:
    if backend == "gymnasium" and (env_id, backend) not in REGISTRY:
        from msrl.envs._gymnasium import GymnasiumEnv

        return functools.partial(GymnasiumEnv, env_id), Backend(GymnasiumEnv)
    if backend == "pettingzoo" and (env_id, backend) not in REGISTRY:
        from msrl.envs._pettingzoo import PettingZooEnv

        return functools.partial(PettingZooEnv, env_id.partition(":")[2]), Backend(PettingZooEnv)
    family = _family(env_id)
    if (env_id, backend) not in REGISTRY and family is not None and family.backend == backend:
        entry = family.factory(env_id)
    else:
        entry = REGISTRY[(env_id, backend)]
    factory = entry.factory
    if isinstance(factory, str):
        factory = import_path(factory)
    return factory, entry


def _spec_of(env_id: str, backend: str, kwargs: dict[str, Any], seed: int, env: Any) -> EnvSpec:
    """The ``EnvSpec`` of a built (or probed) environment."""
    return EnvSpec(
        env_id,
        backend,
        dict(kwargs),
        seed,
        env.observation_space,
        env.action_space,
        getattr(env, "num_agents", 1),
        getattr(env, "groups", None),
        getattr(env, "reward_threshold", None),
        getattr(env, "frame_stack", 0),
    )


def make(
    env_id: str,
    num_envs: int,
    seed: int = 0,
    backend: str | None = None,
    *,
    defaults: EnvDefaults | None = None,
    **kwargs: Any,
) -> Any:
    """Build ``num_envs`` copies of ``env_id``, stepped together.

    ``defaults``: how the fragment's executor wants environments built (an algorithm
    passes ``run.env_defaults``): ``backend=None`` takes the first of its backends the
    environment has (see ``msrl.envs``'s docstring), a device backend runs on its
    device, and its threads shard a large NumPy batch or run a threaded backend's
    kernels.  Without it, plain defaults: the environment's default backend, one
    thread.  An unknown id or backend is a ``ConfigError`` naming the valid choices or
    close matches.  Inside a build of another fragment the result is a ``Declared``
    environment that knows its ``spec``, spaces and ``num_envs``."""
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    available = backends(env_id)
    if not available:
        raise _unknown(env_id)
    defaults = EnvDefaults() if defaults is None else defaults
    if not isinstance(defaults, EnvDefaults):
        raise ConfigError(f"make's defaults must be an msrl.EnvDefaults (run.env_defaults), got {defaults!r}")
    chosen = _choose_backend(env_id, available, backend, defaults)
    factory, entry = _factory(env_id, chosen)
    call_kwargs = dict(kwargs)
    if entry.on_device and defaults.device is not None:  # else the backend's default: cuda on the GPU
        call_kwargs.setdefault("device", defaults.device)
    if entry.threaded:
        call_kwargs.setdefault("threads", defaults.threads)
    if entry.fallback:  # where the executor prefers this backend, a machine that cannot build it runs NumPy
        call_kwargs.setdefault("fallback", chosen in defaults.backends)
    # A multi-agent environment's cost grows with its agents: count agent slots, not environments.
    agents = spec(env_id, **kwargs).num_agents if entry.shardable and defaults.threads > 1 else 1
    shards = min(defaults.threads, num_envs * agents // MIN_ENVS_PER_SHARD) if entry.shardable else 1

    def build() -> Any:
        if shards > 1:
            env: Any = ShardedEnv(
                lambda n, s: _construct(env_id, factory, num_envs=n, seed=s, **call_kwargs), num_envs, seed, shards
            )
        else:
            env = _construct(env_id, factory, num_envs=num_envs, seed=seed, **call_kwargs)
        if not isinstance(env, Declared):
            reference = env.shards[0] if isinstance(env, ShardedEnv) else env
            env.spec = _spec_of(env_id, chosen, kwargs, seed, reference)
        return env

    env = build()
    if isinstance(env, Declared):  # building another fragment: describe it, construct nothing
        described = spec(env_id, **kwargs)
        env_spec = EnvSpec(
            env_id,
            chosen,
            dict(kwargs),
            seed,
            described.observation_space,
            described.action_space,
            described.num_agents,
            described.groups,
            described.reward_threshold,
            described.frame_stack,
        )
        return Declared(
            component_class(env),
            build,
            num_envs=num_envs,
            num_agents=described.num_agents,
            groups=described.groups,
            observation_space=described.observation_space,
            action_space=described.action_space,
            spec=env_spec,
        )
    return env


@functools.lru_cache(maxsize=64)
def _describe(env_id: str, frozen_kwargs: tuple[tuple[str, Hashable], ...]) -> EnvSpec:
    available = backends(env_id)
    if not available:
        raise _unknown(env_id)
    host = next((b for b in _DEFAULT_BACKENDS if b in available), None) or _choose_backend(
        env_id, available, None, EnvDefaults()
    )
    factory, _ = _factory(env_id, host)
    with constructing():
        probe = _construct(env_id, factory, num_envs=1, seed=0, **dict(frozen_kwargs))
    try:
        return _spec_of(env_id, host, dict(frozen_kwargs), 0, probe)
    finally:
        probe.close()


def spec(env_id: str, **kwargs: Any) -> EnvSpec:
    """``env_id``'s spaces (and number of agents) without building a batch of it:
    what an algorithm's ``__init__`` sizes its networks with."""
    return _describe(env_id, tuple(sorted(kwargs.items())))


PACKAGE = Path(__file__).resolve().parent
"""``msrl/envs``: each of its subpackages is one environment's folder."""
_REGISTRATIONS: dict[str, EnvRegistration] = {}
_FAMILIES: list[EnvFamily] = []


def _discover() -> None:
    """Register the environment of every folder of this package (its ``REGISTRATION``)."""
    for found in sorted(pkgutil.iter_modules([str(PACKAGE)]), key=lambda m: m.name):
        if not found.ispkg or found.name.startswith("_"):
            continue
        package = importlib.import_module(f"{__package__}.{found.name}")
        registration = getattr(package, "REGISTRATION", None)
        if isinstance(registration, EnvFamily):
            _FAMILIES.append(registration)
            continue
        if not isinstance(registration, EnvRegistration):
            raise TypeError(
                f"{package.__name__} is an environment's folder and must declare REGISTRATION "
                "(an EnvRegistration, or an EnvFamily)"
            )
        if registration.env_id in _REGISTRATIONS:
            raise TypeError(f"{package.__name__} registers {registration.env_id!r} again")
        if registration.kernel is not None and registration.kernel in kernel_sources():
            raise TypeError(f"{package.__name__}: another environment's kernel source is also {registration.kernel!r}")
        _REGISTRATIONS[registration.env_id] = registration
        for backend, entry in registration.backends().items():
            REGISTRY[(registration.env_id, backend)] = entry


def registrations() -> dict[str, EnvRegistration]:
    """Env id -> ``EnvRegistration`` of every environment msrl builds in (one per folder)."""
    return dict(_REGISTRATIONS)


def families() -> list[EnvFamily]:
    """The environment families msrl builds in (``ALE/<Game>-v5``, ``MinAtar/<Game>-v1``)."""
    return list(_FAMILIES)


def kernel_sources() -> dict[str, Path]:
    """Kernel name -> its CUDA C source, for every environment that has kernels."""
    return {r.kernel: r.kernel_source for r in _REGISTRATIONS.values() if r.kernel and r.kernel_source}


_discover()


__all__ = [
    "Backend",
    "EnvFamily",
    "EnvRegistration",
    "EnvSpec",
    "MIN_ENVS_PER_SHARD",
    "PLUGIN_GROUP",
    "REGISTRY",
    "backends",
    "env_ids",
    "families",
    "kernel_sources",
    "make",
    "register",
    "registrations",
    "spec",
]
