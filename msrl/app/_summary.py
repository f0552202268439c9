"""The results of a comparison: each finished run's row (throughput, time split, time to the
target return), and the table of them all (seeds together), written as CSV and Markdown, with
plots of the learning curves and the time split."""

from __future__ import annotations

import csv
import math
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import cluster
from msrl.app._grid import Combination
from msrl.app._plots import plot_curves, plot_time_split
from msrl.app._run import Run
from msrl.app._run_directory import PLACEMENT_NAME, read_metrics

PHASES = ("env", "inference", "buffer", "learn", "communication", "other")


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


def aggregate(
    combos: Sequence[Combination],
    rows: Sequence[Mapping[str, Any]],
    predicted: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One table row per combination label (seeds together), in the order of ``combos``, with its
    prediction (``msrl compare --predict``) and the prediction's error against the measurement."""
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
        guess = (predicted or {}).get(label)
        if guess is not None:
            measured = table[-1]["seconds_per_iteration"]
            table[-1].update(guess)
            seconds = guess["predicted_seconds_per_iteration"]
            table[-1]["prediction_error"] = seconds / measured - 1 if measured > 0 and math.isfinite(seconds) else None
    return table


def _cell(value: Any, key: str, digits: int | None) -> str:
    if key == "prediction_error" and isinstance(value, float):
        return f"{value:+.0%}"
    return _fmt(value, digits) if digits is not None else _fmt(value)


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


PREDICTED_COLUMNS = [
    ("predicted env steps/s", "predicted_env_steps_per_s", 0),
    ("predicted s/iter", "predicted_seconds_per_iteration", 3),
    ("error", "prediction_error", None),
    ("predicted to dominate", "predicted_dominant", None),
]
"""The columns ``msrl compare --predict`` adds: the cost model's figures beside the measured ones."""


def markdown_table(table: Sequence[Mapping[str, Any]], target: float | None) -> str:
    columns = MARKDOWN_COLUMNS + (PREDICTED_COLUMNS if any("prediction_error" in row for row in table) else [])
    header = [name for name, _, _ in columns] + ["final return (mean ± std)", "resources (replicas, nodes)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table:
        cells = [_cell(row.get(key), key, digits) for _, key, digits in columns]
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


def write_summary(
    out: Path,
    combos: Sequence[Combination],
    rows: list[dict[str, Any]],
    target: float | None,
    config_name: str,
    stream: TextIO,
    table_stream: TextIO,
    predicted: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The table of ``rows`` (one row per combination), printed to ``table_stream`` and written
    into ``out`` as CSV and Markdown, with the plots; returns it and the files written, by kind.
    Nothing is written while no run has finished."""
    table = aggregate(combos, rows, predicted)
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
    return table, files
