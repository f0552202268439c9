"""Built-in batched environments and the registry of their backends.

One environment id (``"CartPole-v1"``) can have several backends: ``numpy``
(CPU), ``torch`` (any torch device) and ``cuda`` (CUDA C kernels).  Backends of
one environment agree step for step; ``msrl.envs.consistency`` checks it.

The ``cuda`` backends live in ``fragments`` (they need pycuda, which ``msrl`` must
not know about) and register themselves here when ``fragments.cuda`` is
imported, so ``msrl.envs`` never imports them.

Example::

    >>> import msrl.envs
    >>> env = msrl.envs.make("CartPole-v1", num_envs=4, seed=0)
    >>> env.reset().shape
    (4, 4)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from msrl._errors import ConfigError

# (env id, backend) -> "module:Class" (imported on first use) or a factory.
_REGISTRY: dict[tuple[str, str], str | Callable[..., Any]] = {}


@dataclass(frozen=True)
class EnvSpec:
    """What ``make`` was called with, so an environment can be rebuilt with
    another batch size, seed or backend (evaluation, executors)."""

    env_id: str
    backend: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0


def register(env_id: str, backend: str, factory: str | Callable[..., Any]) -> None:
    """Register ``factory(num_envs=, seed=, **kwargs)`` as ``backend`` of ``env_id``."""
    _REGISTRY[(env_id, backend)] = factory


def env_ids() -> list[str]:
    return sorted({env_id for env_id, _ in _REGISTRY})


def backends(env_id: str) -> list[str]:
    return sorted(backend for eid, backend in _REGISTRY if eid == env_id)


def make(env_id: str, num_envs: int, seed: int = 0, backend: str = "numpy", **kwargs: Any):
    """Build ``num_envs`` copies of ``env_id`` on ``backend``; raises ``ConfigError``
    naming the valid choices for an unknown id or backend."""
    if env_id not in env_ids():
        raise ConfigError(f"unknown environment {env_id!r}; valid choices: {', '.join(env_ids())}")
    if (env_id, backend) not in _REGISTRY:
        raise ConfigError(
            f"environment {env_id!r} has no {backend!r} backend; valid choices: {', '.join(backends(env_id))}"
        )
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    factory = _REGISTRY[(env_id, backend)]
    if isinstance(factory, str):
        module_name, _, class_name = factory.partition(":")
        factory = getattr(importlib.import_module(module_name), class_name)
    env = factory(num_envs=num_envs, seed=seed, **kwargs)
    env.spec = EnvSpec(env_id, backend, dict(kwargs), seed)
    return env


register("CartPole-v1", "numpy", "msrl.envs.cartpole:CartPoleNumpy")
register("CartPole-v1", "torch", "msrl.envs.cartpole_torch:CartPoleTorch")
register("Pendulum-v1", "numpy", "msrl.envs.pendulum:PendulumNumpy")
register("Pendulum-v1", "torch", "msrl.envs.pendulum_torch:PendulumTorch")

__all__ = ["EnvSpec", "backends", "env_ids", "make", "register"]
