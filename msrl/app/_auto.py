"""Choosing the distribution for a run: calibrate the unsplit run, predict every candidate
policy on the cluster from the traced graph (``fragments.predict``), rank them.  ``msrl plan``
prints the ranking; ``policy: auto`` trains under its first row.

The ranking is a pure function of the calibration, the cluster's shape and the constants, so a
recorded calibration gives the same plan every time."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import fragments
import policies
from msrl.app._config import LoadedConfig, validate
from msrl.app._plan import recipe_of
from msrl.core import ConfigError, MsrlError, trace


@dataclass
class PlanRow:
    """One candidate: its policy entry, what it is called in the table and its prediction."""

    label: str
    spec: dict[str, Any]
    prediction: fragments.Prediction
    changes_learning: bool = False
    """The candidate acts with weights an update old (``async_single_learner``): what it learns differs."""


@dataclass
class PlacementPlan:
    """The candidates ranked for one config on one cluster, fastest feasible first."""

    config_name: str
    shape: fragments.ClusterShape
    constants: fragments.CostConstants
    calibration: fragments.Calibration
    rows: list[PlanRow] = field(default_factory=list)

    @property
    def best(self) -> PlanRow:
        feasible = [row for row in self.rows if row.prediction.feasible]
        if not feasible:
            reasons = "; ".join(f"{row.label}: {row.prediction.reason}" for row in self.rows[:4])
            raise ConfigError(f"no distribution policy can run this config on the cluster ({reasons})")
        return feasible[0]

    def choice_line(self) -> str:
        """What a ``policy: auto`` run prints when it starts: the choice, its predicted rate and why."""
        best = self.best
        p = best.prediction
        others = [row for row in self.rows if row.prediction.feasible and row is not best]
        margin = (
            f", {p.env_steps_per_s / others[0].prediction.env_steps_per_s:.2f}x {others[0].label}" if others else ""
        )
        return (
            f"msrl: policy auto chose {best.label}: predicted {p.env_steps_per_s:,.0f} env steps/s{margin}; "
            f"most of an iteration is {p.dominant} (msrl plan shows every candidate)"
        )

    def reason(self) -> str:
        """Why the first row wins: what dominates its iteration, and what the runner-up spends more on."""
        best = self.best
        p = best.prediction
        parts = [
            f"{best.label} wins: {p.env_steps_per_s:,.0f} env steps/s, {p.iteration_s * 1e3:.1f} ms an iteration "
            f"({p.compute_s * 1e3:.1f} compute, {p.communication_s * 1e3:.1f} communication), most of it "
            f"{p.dominant}"
        ]
        others = [row for row in self.rows if row.prediction.feasible and row is not best]
        if others:
            second = others[0].prediction
            parts.append(
                f"next: {others[0].label} at {second.env_steps_per_s / p.env_steps_per_s:.2f}x, most of it "
                f"{second.dominant}"
            )
        return "; ".join(parts)

    def scaling(self) -> dict[str, str]:
        """Preset -> the replica count beyond which more replicas stop paying (the first whose next
        count adds less than half of what one more replica's share would), among the candidates."""
        by_preset: dict[str, list[tuple[int, float]]] = {}
        for row in self.rows:
            counts = [v for k, v in row.spec.items() if k in ("actors", "envs", "learners")]
            if counts and row.prediction.feasible:
                by_preset.setdefault(row.spec["preset"], []).append((counts[0], row.prediction.env_steps_per_s))
        out = {}
        for preset, points in by_preset.items():
            if len(points) < 2:  # one count ranked: nothing says where it stops
                continue
            points.sort()
            stop = points[-1][0]
            for (n, rate), (m, more) in zip(points, points[1:]):
                if more - rate < 0.5 * rate * (m - n) / n:  # under half the linear gain
                    stop = n
                    break
            out[preset] = f"x{stop}" + ("" if stop < points[-1][0] else " or more")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON data (``plan.json``): an unlimited rate or an unplaceable row's time as null."""
        return _finite(
            {
                "config": self.config_name,
                "cluster": asdict(self.shape),
                "constants": asdict(self.constants),
                "calibration": asdict(self.calibration),
                "chosen": self.best.label,
                "chosen_policy": self.best.spec,
                "stops_scaling": self.scaling(),
                "rows": [
                    {"label": r.label, "policy": r.spec, "changes_learning": r.changes_learning, **asdict(r.prediction)}
                    for r in self.rows
                ],
            }
        )

    def table(self) -> str:
        """The plan as ``msrl plan`` prints it: one row per candidate, fastest first."""
        head = (
            f"plan for {self.config_name} on {self.shape.hosts} host(s) x {self.shape.cores:g} cores"
            f"{f', {self.shape.gpus:g} GPUs' if self.shape.gpus else ''}, link: {self.shape.link}; "
            f"calibrated: {self.calibration.iteration_s * 1e3:.1f} ms an iteration of {self.calibration.env_steps:,} "
            "env steps unsplit"
        )
        lines = [
            head,
            f"{'policy':<34} {'env steps/s':>12} {'iter ms':>9} {'compute':>9} {'comm':>9} {'CPUs':>5}  what dominates",
        ]
        for row in self.rows:
            p = row.prediction
            name = row.label + (" (async)" if row.changes_learning else "")
            if not p.feasible:
                lines.append(f"{name:<34} {'-':>12} {'-':>9} {'-':>9} {'-':>9} {p.cpus:>5g}  cannot run: {p.reason}")
                continue
            lines.append(
                f"{name:<34} {p.env_steps_per_s:>12,.0f} {p.iteration_s * 1e3:>9.1f} {p.compute_s * 1e3:>9.1f} "
                f"{p.communication_s * 1e3:>9.1f} {p.cpus:>5g}  {p.dominant}"
            )
        scaling = self.scaling()
        if scaling:
            lines.append(
                "stops scaling (among the counts ranked): "
                + ", ".join(f"{k} at {v}" for k, v in sorted(scaling.items()))
            )
        lines.append(self.reason())
        return "\n".join(lines)


def _finite(value: Any) -> Any:
    """JSON has no infinity: an unlimited rate or an unplaceable row's time is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def this_machine() -> fragments.ClusterShape:
    """This machine as an embedded Ray sees it: one host, its cores, its GPUs, and as many CPUs as a
    policy asks up to ``cluster.MAX_CPUS_PER_CORE`` a core (msrl starts the embedded Ray with them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    import torch

    import cluster

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return fragments.ClusterShape(
        hosts=1, cores=float(cores), gpus=float(gpus), cpus=float(cluster.MAX_CPUS_PER_CORE * cores)
    )


def cluster_shape(address: str) -> fragments.ClusterShape:
    """The Ray cluster at ``address``: as many hosts as it has nodes with CPUs, each with the
    smallest node's CPUs and GPUs (the model takes the hosts alike)."""
    import cluster

    nodes = [n for n in cluster.node_resources(address) if n.get("CPU", 0) > 0]
    if not nodes:
        raise ConfigError(f"the Ray cluster at {address!r} has no node with CPUs")
    cpus = min(n["CPU"] for n in nodes)
    return fragments.ClusterShape(hosts=len(nodes), cores=cpus, gpus=min(n.get("GPU", 0.0) for n in nodes))


def hypothetical_cluster(
    hosts: int, link: str, cores: float | None = None, gpus: float = 0.0
) -> fragments.ClusterShape:
    """A cluster the user names: ``hosts`` hosts of ``cores`` cores (this machine's by default),
    ``gpus`` GPUs each, joined by ``link`` (``1gbit/0.5ms``)."""
    if hosts < 1:
        raise ConfigError(f"--hosts must be >= 1, got {hosts}")
    if cores is not None and cores <= 0:
        raise ConfigError(f"--cpus-per-host must be > 0, got {cores}")
    if gpus < 0:
        raise ConfigError(f"--gpus-per-host must be >= 0, got {gpus}")
    here = this_machine()
    return fragments.ClusterShape(
        hosts=hosts,
        cores=here.cores if cores is None else float(cores),
        gpus=float(gpus),
        link=fragments.Link.parse(link),
    )


def read_calibration(path: str) -> fragments.Calibration:
    """The calibration recorded in a ``plan.json`` (or a bare calibration's JSON), checked."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read a calibration from {path!r}: {exc}") from None
    data = data.get("calibration", data) if isinstance(data, dict) else data
    try:
        calibration = fragments.Calibration.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path!r} holds no calibration (a plan.json's 'calibration'): {exc}") from None
    return calibration


def calibrate_run(config: LoadedConfig, budget_s: float = 60.0) -> fragments.Calibration:
    """The unsplit run of ``config`` measured (``fragments.calibrate``) under ``local``, with an
    off-policy learner's ``learning_starts`` passed first."""
    warmup = int(getattr(config.algo, "learning_starts", 0) or 0)
    return fragments.calibrate(
        recipe_of(config), policies.load_policy("local"), warmup_env_steps=warmup, budget_s=budget_s
    )


def rank_policies(
    config: LoadedConfig,
    calibration: fragments.Calibration,
    shape: fragments.ClusterShape,
    constants: fragments.CostConstants | None = None,
    params: policies.AutoParams | None = None,
) -> PlacementPlan:
    """Every candidate of ``params`` predicted on ``shape`` from ``calibration``, fastest feasible
    first (ties: fewer CPUs, then the label)."""
    constants = constants or fragments.CostConstants()
    params = params or policies.AutoParams()
    recipe = recipe_of(config)
    whole = fragments.declare(recipe)
    graph = trace(whole)
    cpus = shape.cores * shape.hosts
    rows: list[PlanRow] = []
    for spec in policies.candidates(params, cpus, shape.gpus * shape.hosts):
        label = policies.label(spec)
        changes = spec["preset"] in policies.ASYNC_PRESETS
        try:
            fdg = fragments.partition(graph, policies.load_policy(spec))
            fragments.check_builds(recipe, fdg, whole)
        except MsrlError as exc:
            reason = " ".join(str(exc).split())
            rows.append(PlanRow(label, spec, fragments.Prediction(label, feasible=False, reason=reason), changes))
            continue
        prediction = fragments.predict(fdg, calibration, shape, constants)
        prediction.policy = label
        rows.append(PlanRow(label, spec, prediction, changes))
    rows.sort(key=lambda r: (not r.prediction.feasible, -r.prediction.env_steps_per_s, r.prediction.cpus, r.label))
    return PlacementPlan(config.run.name, shape, constants, calibration, rows)


def plan_placement(
    config: LoadedConfig,
    shape: fragments.ClusterShape,
    params: policies.AutoParams | None = None,
    constants: fragments.CostConstants | None = None,
) -> PlacementPlan:
    """Calibrate ``config`` on this machine and rank the candidates on ``shape``."""
    return rank_policies(config, calibrate_run(config), shape, constants, params)


def resolve_auto(config: LoadedConfig, address: str | None) -> tuple[LoadedConfig, PlacementPlan | None]:
    """A ``policy: auto`` config with the policy its plan ranks first put in (the config's ``raw``
    too, so the run directory and checkpoints record what ran), and the plan; any other config as
    it is, with no plan."""
    params = policies.auto_params(config.run.policy)
    if params is None:
        return config, None
    shape = this_machine() if address is None else cluster_shape(address)
    plan = plan_placement(config, shape, params)
    raw = {**config.raw, "policy": dict(plan.best.spec)}
    return validate(raw), plan
