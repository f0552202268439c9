"""A distribution policy as plain data: which components share a fragment, how
many replicas each fragment has, which executor runs it, what resources it
asks for, and how the replicas are placed on the cluster."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from msrl.core import ConfigError, Role

PLACEMENTS = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
MODES = ("sync", "async")
EVERY_COMPONENT = "*"
"""A fragment entry that takes every component no other entry places."""
_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")


def replica_range(value: Any, what: str) -> tuple[int, int]:
    """``(least, most)`` replicas from a count written ``N`` or ``LO..HI`` (``2..8``); ``what`` names
    the setting in the error."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value, value
    match = _RANGE.match(value) if isinstance(value, str) else None
    if match is not None and 1 <= int(match[1]) <= int(match[2]):
        return int(match[1]), int(match[2])
    raise ConfigError(
        f"{what} must be a positive integer or a range LO..HI with 1 <= LO <= HI (e.g. 2..8), got {value!r}"
    )


def replica_count(value: Any, what: str) -> tuple[int, tuple[int, int] | None]:
    """A fragment's ``(replicas, elastic)`` from a count written ``N`` or ``LO..HI``: a range starts
    at its most, and one of a single value (``3..3``) is a fixed count."""
    least, most = replica_range(value, what)
    return most, None if least == most else (least, most)


@dataclass
class FragmentSpec:
    """One fragment.  ``components`` lists component names or roles
    (``env``, ``actor``, ``buffer``, ``learner``); a role takes every component
    of that role not named elsewhere, and ``*`` every component not placed
    anywhere else.

    ``replicas`` may be a range ``LO..HI``: the fragment is elastic, and the run chooses its count
    within the range from what the cluster offers, at start, when a host is lost and when one
    joins. ``replicas`` is then the count in use (``HI`` until one is chosen) and ``elastic`` the
    range."""

    name: str
    components: list[str]
    replicas: int = 1
    executor: str = "cpu"
    resources: dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    device: str = "cpu"
    elastic: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"fragment name must be a non-empty string, got {self.name!r}")
        if (
            not isinstance(self.components, list)
            or not self.components
            or not all(isinstance(c, str) for c in self.components)
        ):
            raise ConfigError(
                f"fragment {self.name!r}: components must be a non-empty list of names, got {self.components!r}"
            )
        written: Any = self.replicas  # a custom policy's YAML may hold a range here
        if isinstance(written, str):
            self.replicas, self.elastic = replica_count(written, f"fragment {self.name!r}: replicas")
        replica_range(self.replicas, f"fragment {self.name!r}: replicas")
        if self.elastic is not None and not self.elastic[0] <= self.replicas <= self.elastic[1]:
            raise ConfigError(
                f"fragment {self.name!r}: {self.replicas} replicas is outside its range "
                f"{self.elastic[0]}..{self.elastic[1]}"
            )
        if not isinstance(self.executor, str) or not self.executor:
            raise ConfigError(f"fragment {self.name!r}: executor must be a name, got {self.executor!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(
                f"fragment {self.name!r}: device must be a torch device name, got {self.device!r}; "
                "valid choices: cpu, cuda, cuda:N"
            )
        self._check_resources()
        self.resources = {k: float(v) for k, v in self.resources.items()}

    def _check_resources(self) -> None:
        """``resources`` maps resource names to amounts: ``CPU``, ``GPU``, ``memory`` (bytes)
        or any custom resource the cluster's nodes declare (``learner_node``,
        ``accelerator_type:H100``)."""
        example = "e.g. {CPU: 1, learner_node: 1}"
        if not isinstance(self.resources, dict):
            raise ConfigError(
                f"fragment {self.name!r}: resources must map names to non-negative numbers, {example}; "
                f"got {self.resources!r}"
            )
        for key, value in self.resources.items():
            if not isinstance(key, str) or not key.strip():
                raise ConfigError(
                    f"fragment {self.name!r}: resource names must be non-empty strings, {example}; got {key!r}"
                )
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"fragment {self.name!r}: resources must map names to non-negative numbers, {example}; "
                    f"got {key}: {value!r}"
                )
        if "object_store_memory" in self.resources:  # Ray refuses it in an actor's request: nothing would hold it
            raise ConfigError(
                f"fragment {self.name!r}: resources cannot reserve object_store_memory (no replica can hold it); "
                "use memory: BYTES for a replica's memory"
            )
        memory = self.resources.get("memory", 0)
        if not float(memory).is_integer():
            raise ConfigError(
                f"fragment {self.name!r}: resources.memory must be a whole number of bytes, "
                f"e.g. memory: 2147483648 for 2 GiB; got {memory!r}"
            )

    @property
    def cpus(self) -> int:
        return max(1, int(self.resources.get("CPU", 1)))


@dataclass
class DistributionPolicy:
    """Fragments plus placement.  ``in_process`` runs the single fragment in the
    driver with no Ray at all (the ``local`` preset)."""

    name: str
    fragments: list[FragmentSpec]
    placement: str = "PACK"
    mode: str = "sync"
    in_process: bool = False

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement strategy {self.placement!r}; valid choices: {', '.join(PLACEMENTS)}")
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; valid choices: {', '.join(MODES)}")
        names = [fragment.name for fragment in self.fragments]
        if not names:
            raise ConfigError("a distribution policy needs at least one fragment")
        if len(set(names)) != len(names):
            raise ConfigError(f"fragment names must be unique, got {names}")
        if self.in_process and (len(self.fragments) != 1 or self.fragments[0].replicas != 1):
            raise ConfigError("an in-process policy has exactly one fragment with one replica")

    @property
    def elastic(self) -> dict[str, tuple[int, int]]:
        """Fragment -> ``(least, most)`` replicas, for each fragment whose count is a range."""
        return {f.name: f.elastic for f in self.fragments if f.elastic is not None}

    def counts(self) -> dict[str, int]:
        """Fragment -> the replicas in use."""
        return {f.name: f.replicas for f in self.fragments}

    def with_counts(self, counts: Mapping[str, int]) -> DistributionPolicy:
        """This policy with ``counts`` replicas of the named elastic fragments (each within its range)."""
        unknown = sorted(set(counts) - set(self.elastic))
        if unknown:
            raise ConfigError(f"fragment {unknown[0]!r} has no replica range; elastic: {', '.join(self.elastic)}")
        return dataclasses.replace(
            self,
            fragments=[
                dataclasses.replace(f, replicas=counts[f.name]) if f.name in counts else f for f in self.fragments
            ],
        )

    def fragment(self, name: str) -> FragmentSpec:
        for fragment in self.fragments:
            if fragment.name == name:
                return fragment
        raise ConfigError(f"no fragment {name!r}; fragments: {', '.join(f.name for f in self.fragments)}")

    def assign(self, roles: dict[str, Role]) -> dict[str, str]:
        """Map every component to its fragment, given ``{component: role}``.

        Exact names win over roles; every component must land in exactly one
        fragment, and every entry must match something.  An entry that is no
        component's name is read as a ``Role`` (``*``, every role: ``None``); an
        entry that is both (PPO's ``learner``) places its component, then, as a
        role, the components of that role left over (GAIL's discriminator beside
        its learner), so the presets' lists carry algorithms with more of a role.
        """
        assignment: dict[str, str] = {}
        by_role: list[tuple[Role | None, str]] = []
        for fragment in self.fragments:
            for entry in fragment.components:
                if entry == EVERY_COMPONENT:
                    by_role.append((None, fragment.name))
                elif entry in roles:
                    if entry in assignment:
                        raise ConfigError(
                            f"component {entry!r} is placed in both {assignment[entry]!r} and {fragment.name!r}"
                        )
                    assignment[entry] = fragment.name
                    if (role := Role.lookup(entry)) is not None:  # ``learner`` also takes the other learners
                        by_role.append((role, fragment.name))
                elif (role := Role.lookup(entry)) is not None:  # a role this algorithm may not use (no buffer, say)
                    by_role.append((role, fragment.name))
                else:
                    choices = sorted(set(roles) | {role.value for role in Role}) + [EVERY_COMPONENT]
                    raise ConfigError(
                        f"fragment {fragment.name!r} names unknown component {entry!r}; "
                        f"valid choices: {', '.join(choices)}"
                    )
        seen_roles: dict[Role, str] = {}
        for role, fragment_name in by_role:
            if role is None:
                continue
            if role in seen_roles:
                raise ConfigError(
                    f"{role.value!r} is listed in both fragments {seen_roles[role]!r} and {fragment_name!r}; "
                    "name the components explicitly to split them"
                )
            seen_roles[role] = fragment_name
        by_role.sort(key=lambda item: item[0] is None)
        for role, fragment_name in by_role:
            for component, component_role in roles.items():
                if role in (Role.parse(component_role), None) and component not in assignment:
                    assignment[component] = fragment_name
        missing = [c for c in roles if c not in assignment]
        if missing:
            raise ConfigError(f"components {missing} are not placed in any fragment of policy {self.name!r}")
        return assignment

    def to_dict(self) -> dict[str, Any]:
        return {
            "placement": self.placement,
            "mode": self.mode,
            "fragments": [
                {
                    "name": f.name,
                    "components": list(f.components),
                    "replicas": f.replicas if f.elastic is None else f"{f.elastic[0]}..{f.elastic[1]}",
                    "executor": f.executor,
                    "resources": dict(f.resources),
                    "device": f.device,
                }
                for f in self.fragments
            ],
        }
