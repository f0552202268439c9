"""Preset distribution policies and the parsing of the config's ``policy`` entry.

``policy`` in a config is either a preset name (``local``), a mapping with a
``preset`` key plus that preset's parameters, or a custom policy in the
generic form (``fragments``, ``placement``, ``mode``) with no Python at all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from msrl import ConfigError
from policies._spec import DistributionPolicy, FragmentSpec


@dataclass
class LocalParams:
    """``local``: one fragment, one replica, in the driver process, no Ray."""

    executor: str = "cpu"
    cpus: int = 1
    device: str = ""
    """Torch device; empty means ``cuda`` for the cuda executor and ``cpu`` otherwise."""


def _local(params: LocalParams) -> DistributionPolicy:
    fragment = FragmentSpec(
        name="local",
        components=["*"],
        executor=params.executor,
        resources={"CPU": float(params.cpus)},
        device=params.device or ("cuda" if params.executor == "cuda" else "cpu"),
    )
    return DistributionPolicy("local", [fragment], in_process=True)


# name -> (parameter dataclass, builder)
PRESETS: dict[str, tuple[type, Callable[[Any], DistributionPolicy]]] = {
    "local": (LocalParams, _local),
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def _build_params(preset: str, params_type: type, values: dict[str, Any]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(params_type)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown parameter {unknown[0]!r} for policy {preset!r}; valid choices: {', '.join(fields)}")
    checked = {}
    for key, value in values.items():
        expected = type(fields[key].default)
        if expected is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ConfigError(f"policy.{key} must be {expected.__name__}, got {value!r}")
        checked[key] = value
    return params_type(**checked)


def load_policy(spec: Any) -> DistributionPolicy:
    """Turn the config's ``policy`` entry into a ``DistributionPolicy``."""
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"policy must be a preset name or a mapping, got {spec!r}; presets: {', '.join(preset_names())}")
    if "preset" in spec:
        values = dict(spec)
        name = values.pop("preset")
        if name not in PRESETS:
            raise ConfigError(f"unknown policy {name!r}; valid choices: {', '.join(preset_names())} or a custom policy with 'fragments'")
        params_type, build = PRESETS[name]
        return build(_build_params(name, params_type, values))
    if "fragments" in spec:
        return _custom(spec)
    raise ConfigError(f"policy mapping needs 'preset' or 'fragments'; presets: {', '.join(preset_names())}")


def _custom(spec: dict[str, Any]) -> DistributionPolicy:
    allowed = {"name", "fragments", "placement", "mode"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(f"unknown policy key {unknown[0]!r}; valid choices: {', '.join(sorted(allowed))}")
    if not isinstance(spec["fragments"], list):
        raise ConfigError("policy.fragments must be a list of fragments")
    fragment_keys = {f.name for f in dataclasses.fields(FragmentSpec)}
    fragments = []
    for index, raw in enumerate(spec["fragments"]):
        if not isinstance(raw, dict):
            raise ConfigError(f"policy.fragments[{index}] must be a mapping, got {raw!r}")
        bad = sorted(set(raw) - fragment_keys)
        if bad:
            raise ConfigError(f"unknown key {bad[0]!r} in policy.fragments[{index}]; valid choices: {', '.join(sorted(fragment_keys))}")
        if "name" not in raw or "components" not in raw:
            raise ConfigError(f"policy.fragments[{index}] needs 'name' and 'components'")
        fragments.append(FragmentSpec(**raw))
    return DistributionPolicy(
        name=spec.get("name", "custom"),
        fragments=fragments,
        placement=spec.get("placement", "PACK"),
        mode=spec.get("mode", "sync"),
    )


