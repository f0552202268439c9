"""The grid of a comparison: which runs ``msrl compare`` makes of its ``--policies``,
``--placements``, ``--set key=a,b,c`` sweeps and ``--seeds``, and each run's ``policy`` entry."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msrl.core import ConfigError, read_yaml
from policies import PRESETS


@dataclass(frozen=True)
class Combination:
    """One run of a comparison: a policy (preset name or custom policy file), a placement (None:
    the policy's own), the swept ``--set`` values, and a seed."""

    policy: str
    placement: str | None
    sweep: tuple[tuple[str, str], ...]
    seed: int

    @property
    def label(self) -> str:
        """The combination without its seed: a row of the table, a line of the plots."""
        parts = [Path(self.policy).stem if self.policy.endswith((".yaml", ".yml")) else self.policy]
        if self.placement:
            parts.append(self.placement)
        parts += [f"{key}={value}" for key, value in self.sweep]
        return " ".join(parts)

    @property
    def key(self) -> str:
        return f"{self.label} seed={self.seed}"

    @property
    def slug(self) -> str:
        """Its run directory's name: the label with anything but letters, digits, ``.-=`` as ``_``."""
        return re.sub(r"[^A-Za-z0-9.=-]+", "_", self.label).strip("_")[:150] + f"_seed{self.seed}"


def split_sweeps(overrides: Sequence[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """``--set`` items as (fixed overrides, grid axes): ``key=a,b,c`` is an axis with three values;
    a YAML list or mapping (``key=[1,2]``) is one value."""
    fixed, grid = [], []
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        if key == "policy" or key.startswith("policy."):
            raise ConfigError(
                f"--set {key}=... : compare sets the policy per combination; use --policies (and --placements)"
            )
        if key in ("seed", "name"):
            raise ConfigError(f"--set {key}=... : compare chooses it per run; use --seeds and --name")
        if "," in text and not text.lstrip().startswith(("[", "{", "'", '"')):
            values = [v.strip() for v in text.split(",")]
            if any(not v for v in values) or len(set(values)) != len(values):
                raise ConfigError(f"--set {key}={text}: a sweep needs distinct, non-empty values separated by commas")
            grid.append((key, values))
        else:
            fixed.append(item)
    return fixed, grid


def combinations(
    policies: Sequence[str], placements: Sequence[str], grid: Sequence[tuple[str, list[str]]], seeds: Sequence[int]
) -> list[Combination]:
    """Every policy x placement x grid point x seed, in that order.  Placements apply to the
    policies that have one (not ``local``, which runs in the driver)."""
    combos = []
    for policy in policies:
        spots: list[str | None] = list(placements) if placements and _has_placement(policy) else [None]
        for placement in spots:
            for point in itertools.product(*[[(key, v) for v in values] for key, values in grid]):
                for seed in seeds:
                    combos.append(Combination(policy, placement, tuple(point), seed))
    return combos


def _has_placement(policy: str) -> bool:
    """Whether a placement strategy means something for the policy (``local`` runs in the driver)."""
    if policy.endswith((".yaml", ".yml")):
        entry = read_yaml(policy)
        if "preset" not in entry:
            return True  # a custom policy: placement is one of its keys
        policy = str(entry["preset"])
    return policy in PRESETS and "placement" in getattr(PRESETS[policy][0], "__dataclass_fields__", {})


def policy_entry(combo: Combination, own: Any = None) -> Any:
    """The config's ``policy`` value for a combination.  A preset that is the config's own policy
    (``own``, the config's ``policy`` value) keeps the config's settings for it (``cpus``,
    ``device``, replica counts: ``configs/ppo_atari.yaml``'s ``local`` with both CPUs); any other
    preset runs with its defaults."""
    if combo.policy.endswith((".yaml", ".yml")):
        entry: Any = read_yaml(combo.policy)
    elif combo.policy in PRESETS:
        mine = {"preset": own} if isinstance(own, str) else own if isinstance(own, dict) else {}
        entry = dict(mine) if mine.get("preset") == combo.policy else {"preset": combo.policy}
    else:
        raise ConfigError(
            f"unknown policy {combo.policy!r} in --policies; valid choices: {', '.join(sorted(PRESETS))} "
            f"or a custom policy YAML file"
        )
    if combo.placement:
        entry = {**entry, "placement": combo.placement}
    return entry
