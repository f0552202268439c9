"""Algorithms by name: the built-in table, or a user's class as ``package.module:Class``."""

from __future__ import annotations

import dataclasses
import importlib

from msrl.core import Algorithm, ConfigError

BUILTIN = {
    "a2c": "algorithms.a2c:A2C",
    "dqn": "algorithms.dqn:DQN",
    "impala": "algorithms.impala:IMPALA",
    "ippo": "algorithms.mappo:IPPO",
    "mappo": "algorithms.mappo:MAPPO",
    "ppo": "algorithms.ppo:PPO",
    "sac": "algorithms.sac:SAC",
}
"""Built-in algorithm name -> ``module:Class``, imported on first use."""


def algorithm_names() -> list[str]:
    return sorted(BUILTIN)


def get_algorithm(name: str) -> type[Algorithm]:
    """A built-in algorithm by name, or a user's as ``package.module:ClassName``."""
    spec = BUILTIN.get(name, name)
    if ":" not in spec:
        raise ConfigError(
            f"unknown algorithm {name!r}; valid choices: {', '.join(algorithm_names())} or 'module:Class'"
        )
    module_name, _, class_name = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load algorithm {name!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"algorithm {name!r} is not an msrl.Algorithm subclass")
    if not dataclasses.is_dataclass(getattr(cls, "Config", None)):
        raise ConfigError(f"algorithm {name!r} has no Config dataclass")
    return cls
