"""Elastic replica counts: a fragment whose ``replicas`` is a range ``LO..HI`` (``policy.actors:
2..8``) runs with as many replicas as the cluster holds. The count is chosen when the run starts,
again when a lost or drained host leaves the rest unable to hold it (fewer replicas, from the last
checkpoint), and when hosts join (more, at a checkpoint boundary). The run's per-run quantities
(``msrl.split``: environments, replay capacity, batches) stay the run's and are shared out anew,
so only counts that divide them are chosen: the experiment stays the same."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

import cluster
from msrl.app._auto import this_machine
from msrl.app._config import LoadedConfig
from msrl.core import ConfigError, share, split_fields

MAX_CHOICES = 100_000
"""How many combinations of counts a policy's ranges may offer (their product)."""


def fitting_counts(config: LoadedConfig, nodes: list[dict[str, float]]) -> dict[str, int] | None:
    """The most replicas of each elastic fragment, within its range, that ``nodes`` (each node's
    total resources) hold and that divide the run's per-run quantities; None where no choice does.
    Several elastic fragments: the choice with the most replicas in all, then the earlier
    fragments' larger."""
    ranges = config.policy.elastic
    choices = 1
    for least, most in ranges.values():
        choices *= most - least + 1
    if choices > MAX_CHOICES:
        raise ConfigError(
            f"the replica ranges of {', '.join(ranges)} offer {choices:,} combinations; "
            f"at most {MAX_CHOICES:,}: narrow them"
        )
    combos = itertools.product(*(range(most, least - 1, -1) for least, most in ranges.values()))
    for combo in sorted(combos, key=lambda c: -sum(c)):
        counts = dict(zip(ranges, combo))
        if not all(_divides(config, count) for count in combo):
            continue
        try:
            cluster.check_feasible(config.policy.with_counts(counts), nodes)
        except ConfigError:
            continue
        return counts
    return None


def cluster_nodes() -> list[dict[str, float]]:
    """The total resources of each node of the connected cluster that answers now."""
    return cluster.answering_nodes()


def with_counts(config: LoadedConfig, counts: Mapping[str, int]) -> LoadedConfig:
    """``config`` running ``counts`` replicas of its elastic fragments (its ``raw`` keeps the ranges,
    so a resume chooses again)."""
    return dataclasses.replace(config, policy=config.policy.with_counts(counts))


def start_counts(config: LoadedConfig, address: str | None) -> tuple[LoadedConfig, str | None]:
    """``config`` with the counts the cluster at ``address`` holds (this machine's cores for an
    embedded Ray), and the line saying so; a config with no range as it is, with no line. Where not
    even the least counts fit, it starts with them, and placing them says what is short."""
    ranges = config.policy.elastic
    if not ranges:
        return config, None
    if address is None and not cluster.starts_embedded(address):
        address = "auto"  # Ray is connected in this process already
    where = "this machine" if address is None else "the cluster"
    nodes = [_machine()] if address is None else cluster.node_resources(address)
    counts = fitting_counts(config, nodes)
    if counts is None:
        counts = {name: least for name, (least, _) in ranges.items()}
        why = f"the least: {where} holds no more ({_offer(nodes)})"
    else:
        why = f"as {where} holds ({_offer(nodes)})"
    return with_counts(config, counts), f"msrl: elastic policy: {describe(config, counts)}, {why}"


def describe(config: LoadedConfig, counts: Mapping[str, int]) -> str:
    """``rollout 4 of 2..8 replicas`` for each elastic fragment."""
    ranges = config.policy.elastic
    return ", ".join(f"{name} {counts[name]} of {ranges[name][0]}..{ranges[name][1]} replicas" for name in ranges)


def change_line(config: LoadedConfig, before: Mapping[str, int], after: Mapping[str, int], why: str) -> str:
    """What changed in an elastic run, and why: ``rollout 4 -> 2 replicas (node ... lost); num_envs
    64 shared 32 a replica``."""
    changed = [name for name in after if before.get(name) != after[name]]
    counts = ", ".join(f"{name} {before[name]} -> {after[name]} replicas" for name in changed)
    shares = ", ".join(
        f"{field} {getattr(config.algo, field)} as {count} x {getattr(config.algo, field) // count}"
        for field in split_fields(config.algo)
        for count in sorted({after[name] for name in changed})
    )
    tail = f"; per-run quantities shared anew: {shares}" if shares else ""
    return f"msrl: elastic policy: {counts} ({why}){tail}; environments start new episodes"


def _divides(config: LoadedConfig, count: int) -> bool:
    try:
        share(config.algo, count)
    except ConfigError:
        return False
    return True


def _machine() -> dict[str, float]:
    """This machine as one node of its real cores and GPUs: what an elastic count should fit in
    (an embedded Ray offers more logical CPUs than cores only so that a fixed policy still runs)."""
    shape = this_machine()
    return {"CPU": shape.cores, **({"GPU": shape.gpus} if shape.gpus else {})}


def _offer(nodes: list[dict[str, float]]) -> str:
    cpus = sum(node.get("CPU", 0.0) for node in nodes)
    gpus = sum(node.get("GPU", 0.0) for node in nodes)
    count = f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    return f"{count}, {cpus:g} CPUs" + (f", {gpus:g} GPUs" if gpus else "")
