"""``msrl compare``: one config under several distribution policies, placements and ``--set``
grids (sweeps), seeds each, run one after another on the same Ray (embedded by default), each
run in its own directory; then a table (printed, CSV, Markdown) and plots of the lot.

Layout of ``<runs_dir>/compare-<name>/``::

    runs/<combination>_seed<k>/   one ordinary run directory per run (metrics, TensorBoard, checkpoint)
    results.jsonl                 one row per finished run, appended as each run ends (its
                                  ``run_dir`` relative to the comparison's directory)
    summary.csv, summary.md       the table, one row per combination (seeds aggregated)
    summary_fragments.csv         the time split of each fragment, for policies with several
    return_vs_time.png, return_vs_steps.png, time_split.png

A run counts as done once its row is in ``results.jsonl``.  Interrupting a compare keeps the
finished runs and their rows; running the same command again skips them and continues an
unfinished run from its last checkpoint (or starts it again when it had none).

Sweeps are grids written ``--set key=a,b,c`` here rather than Ray Tune trials: the runs of a
comparison are timed, so they run one at a time on the same machine (Tune would run trials
side by side and each trial's Ray actors would compete for the cores), and every run stays an
ordinary msrl run directory that ``msrl eval``, ``msrl plot`` and TensorBoard read.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import re
import shutil
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import cluster
from msrl.app._config import load_config
from msrl.app._plan import plan
from msrl.app._plots import plot_curves, plot_time_split
from msrl.app._run import Run, train
from msrl.app._run_directory import CHECKPOINT_NAME, PLACEMENT_NAME, read_metrics
from msrl.core import ConfigError, apply_overrides, read_yaml
from policies import PRESETS, load_policy

RESULTS_NAME = "results.jsonl"
PHASES = ("env", "inference", "buffer", "learn", "communication", "other")
REWARD_THRESHOLDS = {"CartPole-v1": 475.0, "CartPole-v0": 195.0, "Pendulum-v1": -250.0}
"""Default ``--target`` per env: gymnasium's ``reward_threshold`` for CartPole, the learning tests' for Pendulum."""


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


@dataclass
class Comparison:
    """What ``compare`` returns: where everything is, the per-run rows and the table."""

    out_dir: str
    rows: list[dict[str, Any]]
    table: list[dict[str, Any]]
    files: dict[str, str] = field(default_factory=dict)


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
    return policy in PRESETS and "placement" in PRESETS[policy][0].__dataclass_fields__


def _policy_entry(combo: Combination) -> Any:
    """The config's ``policy`` value for a combination."""
    if combo.policy.endswith((".yaml", ".yml")):
        entry: Any = read_yaml(combo.policy)
    elif combo.policy in PRESETS:
        entry = {"preset": combo.policy}
    else:
        raise ConfigError(
            f"unknown policy {combo.policy!r} in --policies; valid choices: {', '.join(sorted(PRESETS))} "
            f"or a custom policy YAML file"
        )
    if combo.placement:
        entry = {**entry, "placement": combo.placement}
    return entry


def compare(
    config: str | os.PathLike,
    policies: Sequence[str],
    *,
    placements: Sequence[str] = (),
    overrides: Sequence[str] = (),
    budget: int | None = None,
    seeds: int = 1,
    address: str | None = None,
    target: float | None = None,
    name: str | None = None,
    stream: TextIO | None = None,
    table_stream: TextIO | None = None,
) -> Comparison:
    """Run ``config`` under every combination not already done, then write the table and plots.
    Progress goes to ``stream`` (stderr), the table to ``table_stream`` (stdout).

    Example::

        result = compare("configs/ppo_cartpole.yaml", ["local", "multi_learner"], budget=20_000)
        print(result.out_dir, result.table[0]["env_steps_per_s"])
    """
    stream = sys.stderr if stream is None else stream
    table_stream = sys.stdout if table_stream is None else table_stream
    if not policies:
        raise ConfigError("--policies needs at least one policy")
    if seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    if target is not None and not math.isfinite(target):
        raise ConfigError(f"--target must be a finite return, got {target}")
    if budget is not None and budget < 1:
        raise ConfigError(f"--budget must be >= 1 env step, got {budget}")
    from policies import PLACEMENTS

    for placement in placements:
        if placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {placement!r}; valid choices: {', '.join(PLACEMENTS)}")
    policies, placements = list(dict.fromkeys(policies)), list(dict.fromkeys(placements))  # each once
    fixed, grid = split_sweeps(overrides)
    base = apply_overrides(read_yaml(os.fspath(config)), fixed)
    if budget is not None:
        base["total_env_steps"] = int(budget)
    first = load_config(None, [], base=base)
    name = name or first.run.name
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"--name must be a plain directory name, got {name!r}")
    out = Path(first.run.runs_dir) / f"compare-{name}"
    combos = combinations(policies, placements, grid, [first.run.seed + k for k in range(seeds)])
    raws = {combo: _raw_config(base, combo, out) for combo in combos}
    for combo, raw in raws.items():  # every combination is checked before anything runs or is written
        try:
            plan(load_config(None, [], base=raw))
        except ConfigError as exc:
            raise ConfigError(f"{combo.label}: {exc}") from None
    env_id = getattr(first.algo, "env_id", None)
    target = REWARD_THRESHOLDS.get(env_id) if target is None else float(target)

    (out / "runs").mkdir(parents=True, exist_ok=True)
    rows = _read_rows(out / RESULTS_NAME)
    done = {row["key"] for row in rows}
    print(
        f"msrl compare: {len(combos)} runs in {out} ({len(done & {c.key for c in combos})} already done)", file=stream
    )
    try:
        for index, combo in enumerate(combos, 1):
            if combo.key in done:
                print(f"msrl compare: [{index}/{len(combos)}] {combo.key}: done already, skipped", file=stream)
                continue
            print(f"msrl compare: [{index}/{len(combos)}] {combo.key}", file=stream)
            baseline = cluster.resources_in_use()
            run = _run(raws[combo], out / "runs" / combo.slug, address, stream)
            cluster.wait_until_released(baseline)  # the next run starts on the cluster this one found
            row = run_row(combo, run, target, load_policy(raws[combo]["policy"]))
            row["run_dir"] = os.path.relpath(run.run_dir, out)  # the comparison can move as a whole
            _append_row(out / RESULTS_NAME, row)
            rows.append(row)
            done.add(combo.key)
    finally:  # interrupted or not, the table shows every finished run: what results.jsonl holds
        wanted = {c.key for c in combos}  # (an interrupt may land between writing a row and keeping it here)
        mine = [r for r in _read_rows(out / RESULTS_NAME) if r["key"] in wanted]
        result = _summarise(out, combos, mine, target, first.run.name, stream, table_stream)
    return result


def _raw_config(base: dict[str, Any], combo: Combination, out: Path) -> dict[str, Any]:
    raw = apply_overrides(base, [f"{key}={value}" for key, value in combo.sweep])
    raw.update(
        policy=_policy_entry(combo), seed=combo.seed, runs_dir=str(out / "runs"), name=combo.slug, progress=False
    )
    return raw


def _run(raw: dict[str, Any], run_dir: Path, address: str | None, stream: TextIO) -> Run:
    """Train one combination; an unfinished earlier attempt continues from its checkpoint."""
    if run_dir.exists():
        checkpoint = run_dir / CHECKPOINT_NAME
        if checkpoint.exists():
            print(f"msrl compare: continuing the unfinished run in {run_dir} from its checkpoint", file=stream)
            return train(None, [], resume=checkpoint, address=address, stream=stream)
        print(f"msrl compare: {run_dir} was interrupted before its first checkpoint; starting it again", file=stream)
        shutil.rmtree(run_dir)
    return train(raw, [], address=address, stream=stream)


def run_row(combo: Combination, run: Run, target: float | None, policy: Any) -> dict[str, Any]:
    """A run's row, from its own metrics: throughput and time split leave out the first iteration
    (start-up, first compilation) when there are three or more."""
    records = run.metrics
    steady = records[1:] if len(records) >= 3 else records
    train_time = sum(float(r["wall_time"]) for r in records)
    steady_time = sum(float(r["wall_time"]) for r in steady)
    skipped = records[: len(records) - len(steady)]  # the first iteration, or nothing
    steady_steps = int(records[-1]["env_steps"]) - (int(skipped[-1]["env_steps"]) if skipped else 0) if records else 0
    split = {phase: statistics.fmean(float(r.get(f"time_{phase}", 0.0)) for r in steady) for phase in PHASES}
    fragments = sorted({key.split("/", 1)[1] for r in steady for key in r if key.startswith("time_") and "/" in key})
    fragment_split = {
        fragment: {
            phase: statistics.fmean(float(r.get(f"time_{phase}/{fragment}", 0.0)) for r in steady) for phase in PHASES
        }
        for fragment in fragments
    }
    reached = _time_to(records, target)
    placement_file = Path(run.run_dir) / PLACEMENT_NAME
    placement = placement_file.read_text(encoding="utf-8").splitlines() if placement_file.exists() else []
    resources = cluster.demand_of(policy)  # what the run's placement group reserves, summed over replicas
    return {
        "key": combo.key,
        "label": combo.label,
        "policy": combo.policy,
        "placement": combo.placement,
        "sweep": dict(combo.sweep),
        "seed": combo.seed,
        "run_dir": run.run_dir,
        "iterations": len(records),
        "env_steps": int(records[-1]["env_steps"]) if records else 0,
        "train_seconds": train_time,
        "env_steps_per_s": steady_steps / steady_time if steady_time > 0 else 0.0,
        "seconds_per_iteration": steady_time / len(steady) if steady else 0.0,
        "split": split,
        "fragment_split": fragment_split,
        "target": target,
        "seconds_to_target": reached[0],
        "steps_to_target": reached[1],
        "final_return": run.evaluation.mean if run.evaluation is not None else _last_return(records),
        "final_return_kind": "greedy" if run.evaluation is not None else "training",
        "resources": resources,
        "replicas": sum(spec.replicas for spec in policy.fragments),
        "placement_report": placement,
        "nodes": len(set(re.findall(r"on node \S+ \((\w+)\)", "\n".join(placement)))) or 1,
    }


def _time_to(records: Sequence[Mapping[str, Any]], target: float | None) -> tuple[float | None, int | None]:
    """Training seconds and env steps until an iteration's mean training return first reached ``target``."""
    if target is None:
        return None, None
    elapsed = 0.0
    for record in records:
        elapsed += float(record["wall_time"])
        value = record.get("episode_return")
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= target:
            return elapsed, int(record["env_steps"])
    return None, None


def _last_return(records: Sequence[Mapping[str, Any]]) -> float | None:
    for record in reversed(records):
        value = record.get("episode_return")
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    return None


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of earlier runs; a line cut short by an interruption is dropped (its run reruns)."""
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _append_row(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


# -- the table and plots -----------------------------------------------------------------------------
def aggregate(combos: Sequence[Combination], rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One table row per combination label (seeds together), in the order of ``combos``."""
    table = []
    for label in dict.fromkeys(c.label for c in combos):
        mine = [r for r in rows if r["label"] == label]
        if not mine:
            continue
        returns = [r["final_return"] for r in mine if r["final_return"] is not None]
        reached = [r["seconds_to_target"] for r in mine if r["seconds_to_target"] is not None]
        table.append(
            {
                "combination": label,
                "seeds": len(mine),
                "env_steps_per_s": statistics.fmean(r["env_steps_per_s"] for r in mine),
                "seconds_per_iteration": statistics.fmean(r["seconds_per_iteration"] for r in mine),
                **{f"{phase}_s": statistics.fmean(r["split"][phase] for r in mine) for phase in PHASES},
                "seconds_to_target": statistics.fmean(reached) if reached else None,
                "reached_target": f"{len(reached)}/{len(mine)}",
                "final_return_mean": statistics.fmean(returns) if returns else None,
                "final_return_std": statistics.pstdev(returns) if len(returns) > 1 else 0.0 if returns else None,
                "final_return_kind": mine[0]["final_return_kind"],
                "resources": ", ".join(f"{k} {v:g}" for k, v in sorted(mine[0]["resources"].items())),
                "replicas": mine[0]["replicas"],
                "nodes": max(r.get("nodes", 1) for r in mine),
                "fragment_split": {
                    fragment: {
                        phase: statistics.fmean(r["fragment_split"][fragment][phase] for r in mine) for phase in PHASES
                    }
                    for fragment in mine[0].get("fragment_split", {})
                },
            }
        )
    return table


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


MARKDOWN_COLUMNS = [
    ("combination", "combination", None),
    ("seeds", "seeds", None),
    ("env steps/s", "env_steps_per_s", 0),
    ("s/iter", "seconds_per_iteration", 3),
    ("env s", "env_s", 3),
    ("inference s", "inference_s", 3),
    ("buffer s", "buffer_s", 3),
    ("learn s", "learn_s", 3),
    ("comm. s", "communication_s", 3),
    ("s to target", "seconds_to_target", 1),
    ("reached", "reached_target", None),
]


def markdown_table(table: Sequence[Mapping[str, Any]], target: float | None) -> str:
    header = [name for name, _, _ in MARKDOWN_COLUMNS] + ["final return (mean ± std)", "resources (replicas, nodes)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table:
        cells = [
            _fmt(row[key], digits) if digits is not None else _fmt(row[key]) for _, key, digits in MARKDOWN_COLUMNS
        ]
        final = (
            "-"
            if row["final_return_mean"] is None
            else f"{row['final_return_mean']:.1f} ± {row['final_return_std']:.1f} ({row['final_return_kind']})"
        )
        cells += [final, f"{row['resources']} ({row['replicas']}, {row['nodes']})"]
        lines.append("| " + " | ".join(cells) + " |")
    split_rows = [
        (row["combination"], fragment, split)
        for row in table
        for fragment, split in row.get("fragment_split", {}).items()
    ]
    if split_rows:  # where fragments differ, the split of each (the table above takes the slowest of all)
        lines += [
            "",
            "Time split per fragment (mean seconds per iteration, slowest replica of the fragment):",
            "",
            "| combination | fragment | " + " | ".join(PHASES) + " |",
            "|" + "---|" * (len(PHASES) + 2),
        ]
        lines += [
            f"| {label} | {fragment} | " + " | ".join(f"{split[p]:.3f}" for p in PHASES) + " |"
            for label, fragment, split in split_rows
        ]
    note = (
        f"Target return {target:g}: seconds of training until an iteration's mean training return first "
        f"reached it (mean over the seeds that did)."
        if target is not None
        else "No target return."
    )
    return (
        "\n".join(lines)
        + "\n\n"
        + note
        + (
            " Time split: mean seconds per iteration in each phase, the slowest replica's, first iteration "
            "left out; phases of different fragments overlap, so they need not add up to s/iter.\n"
        )
    )


def _summarise(
    out: Path,
    combos: Sequence[Combination],
    rows: list[dict[str, Any]],
    target: float | None,
    config_name: str,
    stream: TextIO,
    table_stream: TextIO,
) -> Comparison:
    table = aggregate(combos, rows)
    files: dict[str, str] = {}
    if table:
        files["csv"] = str(out / "summary.csv")
        with open(out / "summary.csv.tmp", "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(
                handle, fieldnames=[k for k in table[0] if k != "fragment_split"], extrasaction="ignore"
            )
            writer.writeheader()
            writer.writerows(table)
        os.replace(out / "summary.csv.tmp", out / "summary.csv")
        per_fragment = [
            {"combination": row["combination"], "fragment": fragment, **{f"{p}_s": v for p, v in split.items()}}
            for row in table
            for fragment, split in row["fragment_split"].items()
        ]
        if per_fragment:
            files["fragments_csv"] = str(out / "summary_fragments.csv")
            with open(out / "summary_fragments.csv.tmp", "w", encoding="utf-8", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(per_fragment[0]))
                writer.writeheader()
                writer.writerows(per_fragment)
            os.replace(out / "summary_fragments.csv.tmp", out / "summary_fragments.csv")
        text = markdown_table(table, target)
        files["markdown"] = str(out / "summary.md")
        (out / "summary.md").write_text(f"# msrl compare: {config_name}\n\n" + text, encoding="utf-8")
        print(text, file=table_stream)
        groups: dict[str, list[list[dict[str, Any]]]] = {}
        for label in (row["combination"] for row in table):
            groups[label] = [read_metrics(out / r["run_dir"]) for r in rows if r["label"] == label]
        files["return_vs_time"] = plot_curves(
            groups, out / "return_vs_time.png", x="time", title=f"{config_name}: training return vs wall-clock time"
        )
        files["return_vs_steps"] = plot_curves(
            groups, out / "return_vs_steps.png", x="steps", title=f"{config_name}: training return vs environment steps"
        )
        files["time_split"] = plot_time_split(
            {row["combination"]: {p: row[f"{p}_s"] for p in PHASES} for row in table},
            out / "time_split.png",
            title=f"{config_name}: time per iteration",
            wall={row["combination"]: row["seconds_per_iteration"] for row in table},
        )
        print(f"msrl compare: table and plots in {out}", file=stream)
    return Comparison(str(out), rows, table, files)


__all__ = [
    "Combination",
    "Comparison",
    "RESULTS_NAME",
    "aggregate",
    "combinations",
    "compare",
    "markdown_table",
    "run_row",
    "split_sweeps",
]
