"""Reading configuration: YAML files (safe loading, aliases refused), ``--set
key=value`` overrides, and typed dataclasses built from plain mappings.

These are the pieces every layer checks its input with (the run's config in
the application, a preset's parameters in ``policies``).  Every mistake is a
``ConfigError`` naming the key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from msrl.core._errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20
"""Bounded input: a config is a page of YAML, not a data file."""


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses anchors and aliases.

    A config has no use for them, and aliases are how a few hundred bytes of YAML
    expand into gigabytes ("billion laughs"): refused when parsed, before anything
    is built from them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(
                f"YAML aliases are not allowed in configs (alias *{event.anchor} at line "
                f"{event.start_mark.line + 1}); write the value out"
            )
        return super().compose_node(parent, index)


def parse_yaml(text: str, source: str = "<string>") -> Any:
    """``yaml.safe_load`` with aliases refused; a syntax error is a ``ConfigError`` naming the line."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        tag = re.search(r"tag '([^']*)'", str(getattr(exc, "problem", "") or ""))
        if isinstance(exc, yaml.constructor.ConstructorError) and tag:  # !!python/... and other unsafe tags
            raise ConfigError(
                f"{source}: YAML tag {tag.group(1)!r}{where} is not allowed in configs; only plain "
                f"values, lists and mappings are"
            ) from exc
        raise ConfigError(f"{source} is not valid YAML{where}") from exc


def read_yaml(path: str) -> dict[str, Any]:
    """A config file as a mapping: safe loading, aliases refused, at most ``MAX_CONFIG_BYTES``."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found")
    size = os.path.getsize(path)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path!r} is {size:,} bytes; a config is at most {MAX_CONFIG_BYTES:,}")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not UTF-8 text (byte {exc.start}); a config is YAML") from None
    data = parse_yaml(text, f"config file {path!r}")
    if data is None:  # an empty file would otherwise train a default run the user never asked for
        raise ConfigError(f"config file {path!r} is empty; a config names at least its algorithm and algo settings")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping of keys, got {type(data).__name__}")
    return data


MAX_CONFIG_NODES = 100_000
"""Most values (mappings, lists and scalars together) in a config: the shipped ones have under 100,
a custom policy of many fragments a few thousand."""
MAX_CONFIG_DEPTH = 32
"""Deepest nesting in a config (the shipped ones: 3)."""


def check_plain_tree(value: Any, what: str = "config") -> None:
    """Refuse a config that is not a plain tree of bounded size: a mapping or list that appears twice
    (shared references, which YAML aliases or a crafted checkpoint's pickle make: copying expands
    them, 10 levels of 10 are 10^10 values), a cycle, over ``MAX_CONFIG_NODES`` values or nesting
    over ``MAX_CONFIG_DEPTH``.  Each container is visited once, so the check itself is bounded."""
    seen: set[int] = set()
    count = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            raise ConfigError(f"{what} has over {MAX_CONFIG_NODES:,} values; a config is at most that")
        if isinstance(item, (dict, list, tuple)):
            if depth >= MAX_CONFIG_DEPTH:
                raise ConfigError(f"{what} is nested over {MAX_CONFIG_DEPTH} levels deep; a config is at most that")
            if not isinstance(item, tuple) and id(item) in seen:  # tuples are immutable: sharing one is harmless
                raise ConfigError(
                    f"{what} uses one mapping or list in several places (a shared reference); "
                    f"a config must be a plain tree: write each value out"
                )
            seen.add(id(item))
            children = list(item.keys()) + list(item.values()) if isinstance(item, dict) else list(item)
            stack.extend((child, depth + 1) for child in children)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides; values are parsed as YAML scalars."""
    check_plain_tree(raw)
    raw = _deep_copy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            value = yaml.load(text, Loader=_NoAliasLoader) if text else ""  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError:
            value = text  # not YAML: the text itself
        parts = key.split(".")
        target = raw
        for depth, part in enumerate(parts[:-1]):
            current = target.get(part)
            if part == "policy" and depth == 0 and isinstance(current, str):
                current = {"preset": current}
            if current is None:
                current = {}
            if not isinstance(current, dict):
                raise ConfigError(f"cannot set {key!r}: {'.'.join(parts[: depth + 1])} is not a mapping")
            target[part] = current
            target = current
        target[parts[-1]] = value
    return raw


def check_keys(values: Mapping[str, Any], names: Sequence[str], prefix: str) -> None:
    """A ``ConfigError`` naming the first key of ``values`` that is not one of ``names`` (a
    dataclass's fields, in their order), the nearest valid key when one is close (a typo), and the
    valid choices."""
    unknown = sorted(str(key) for key in set(values) - set(names))
    if unknown:
        nearest = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f"; did you mean {prefix + nearest[0]!r}?" if nearest else ";"
        raise ConfigError(
            f"unknown config key {prefix + unknown[0]!r}{hint} valid choices: {', '.join(prefix + n for n in names)}"
        )


def build_dataclass(cls: type, values: Any, prefix: str) -> Any:
    """Instantiate ``cls`` from a mapping, rejecting unknown keys and wrong types."""
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    check_keys(values, list(fields), prefix)
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
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)  # YAML 1.1 reads "1e-3" as a string
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):  # .inf / .nan would train to the end with every loss nan
                raise ConfigError(f"{key} must be a finite number, got {value!r}")
            return number
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


def import_object(path: str, what: str) -> Any:
    """The object a ``"package.module:Name"`` string names (a user's algorithm, network or
    environment), its module imported now; one ``ConfigError`` naming ``what`` where it cannot be."""
    module_name, sep, name = path.partition(":") if isinstance(path, str) else ("", "", "")
    if not sep or not module_name or not name:
        raise ConfigError(f"{what} must be 'package.module:Name', got {path!r}")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {what} {path!r}: {exc}") from exc


def check_unit_interval(config: Any, *names: str, prefix: str = "algo.") -> None:
    """Raise ``ConfigError`` unless each named field of ``config`` lies in [0, 1] (discount
    factors, GAE and V-trace lambdas): an algorithm's ``validate`` calls it for its own fields."""
    for name in names:
        value = getattr(config, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{prefix}{name} must be in [0, 1], got {value}")


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
