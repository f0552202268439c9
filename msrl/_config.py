"""Run configuration: a YAML file plus ``--set key=value`` overrides, checked
against typed dataclasses before anything is started or written.

The top level is ``RunConfig``; the ``algo`` section is checked against the
chosen algorithm's own ``Config`` dataclass; ``policy`` against the policy
presets.  Every mistake is a ``ConfigError`` naming the key and the valid
choices.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml

from msrl._algorithm import get_algorithm
from msrl._errors import ConfigError


@dataclass
class RunConfig:
    """Everything about a run that is not the algorithm's own hyper-parameters."""

    name: str = "run"
    """Run name: results go to ``<runs_dir>/<name>`` (``_2``, ``_3``... if taken)."""
    algorithm: str = "ppo"
    """A built-in algorithm name or ``package.module:Class``."""
    seed: int = 1
    """Seeds networks, environments and sampling; the same seed gives the same run."""
    total_env_steps: int = 100_000
    """Training stops after the first iteration that reaches this many environment steps."""
    policy: Any = "local"
    """Distribution policy: a preset name, ``{preset: name, ...params}``, or a custom policy."""
    checkpoint_every: int = 10
    """Write a checkpoint every this many iterations (and always at the end); 0 = only at the end."""
    eval_episodes: int = 20
    """Greedy evaluation episodes run at the end of training; 0 skips it."""
    runs_dir: str = "runs"
    """Where run directories are created."""
    progress: bool = True
    """Show a progress bar on stderr."""
    algo: dict = field(default_factory=dict)
    """The algorithm's hyper-parameters, checked against its Config dataclass."""


@dataclass
class LoadedConfig:
    run: RunConfig
    algo: Any
    raw: dict[str, Any]


def read_yaml(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path!r} is not valid YAML{where}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping of keys, got {type(data).__name__}")
    return data


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides; values are parsed as YAML scalars."""
    raw = _deep_copy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            value = text
        parts = key.split(".")
        target = raw
        for depth, part in enumerate(parts[:-1]):
            current = target.get(part)
            if part == "policy" and depth == 0 and isinstance(current, str):
                current = {"preset": current}
            if current is None:
                current = {}
            if not isinstance(current, dict):
                raise ConfigError(f"cannot set {key!r}: {'.'.join(parts[:depth + 1])} is not a mapping")
            target[part] = current
            target = current
        target[parts[-1]] = value
    return raw


def load_config(path: str | None, overrides: list[str] = (), base: dict[str, Any] | None = None) -> LoadedConfig:
    """Read, override and validate a config.  ``base`` replaces the file (resume)."""
    raw = base if base is not None else read_yaml(path)
    raw = apply_overrides(raw, list(overrides))
    return validate(raw)


def validate(raw: dict[str, Any]) -> LoadedConfig:
    run = build_dataclass(RunConfig, raw, "")
    if not run.name or "/" in run.name or run.name.startswith("."):
        raise ConfigError(f"name must be a plain directory name, got {run.name!r}")
    for key in ("total_env_steps",):
        if getattr(run, key) < 1:
            raise ConfigError(f"{key} must be >= 1, got {getattr(run, key)}")
    for key in ("checkpoint_every", "eval_episodes"):
        if getattr(run, key) < 0:
            raise ConfigError(f"{key} must be >= 0, got {getattr(run, key)}")
    algorithm = get_algorithm(run.algorithm)
    algo = build_dataclass(algorithm.Config, run.algo, "algo.")
    check = getattr(algo, "validate", None)
    if callable(check):
        check()
    from policies import load_policy  # policies depends on msrl; imported late to avoid a cycle

    load_policy(run.policy)
    return LoadedConfig(run=run, algo=algo, raw=raw)


def build_dataclass(cls: type, values: Any, prefix: str) -> Any:
    """Instantiate ``cls`` from a mapping, rejecting unknown keys and wrong types."""
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown config key '{prefix}{unknown[0]}'; valid choices: {', '.join(prefix + f for f in fields)}")
    return cls(**{key: coerce(value, hints[key], prefix + key) for key, value in values.items()})


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Check ``value`` against a type hint, accepting the lossless conversions YAML needs."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in typing.get_args(hint):
            try:
                return coerce(value, option, key)
            except ConfigError as exc:
                errors.append(exc)
        raise ConfigError(f"{key} must be {_type_name(hint)}, got {value!r}")
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                number = float(value)  # YAML 1.1 reads "1e5" as a string
            except ValueError:
                number = None
            if number is not None and number.is_integer():
                return int(number)
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML 1.1 reads "1e-3" as a string
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is dict or origin is dict:
        if isinstance(value, dict):
            return value
    elif hint is list or origin is list:
        if isinstance(value, list):
            return value
    else:
        return value
    raise ConfigError(f"{key} must be {_type_name(hint)}, got {value!r}")


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
