"""What a gate run measures per row, the stored bands (``bands.json`` beside this module), how the
bands follow from a calibration, and the comparison of a result with them.

A row's metrics, over its seeds: the mean final greedy return, how many seeds reached the threshold
(the env's solved return on the mean of the last 10 training episodes), the mean env steps to the
threshold with a seed that never reached it counted at its full budget (so the mean is always
defined and a seed that stops reaching it makes it worse), and the mean training return over the
run (the learning curve's average).  A band is a bound on each: ``min`` for the returns and the
count, ``max`` for the steps.  A calibration runs every row on more seeds (``CALIBRATION_SEEDS``);
its summary (means, spreads, the share that reached) is kept in the bands file beside the bands,
which follow from it and the row's own seeds' values by ``MARGINS``' rules alone (``bands_for``), so
the bands can be derived again from the file (``rederive``) when the rules change."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msrl.app.gate._records import TrainingRecord
from msrl.app.gate._rows import CALIBRATION_SEEDS, GATE_ROWS, MARGINS, RANDOM_RETURN, GateRow

BANDS_FILE = Path(__file__).resolve().parent / "bands.json"
REFRESH_COMMAND = "python -m msrl.app.gate --write-bands"

METRICS = {
    "final_return_mean": ("min", "mean final greedy return"),
    "reached": ("min", "seeds reaching the threshold"),
    "steps_to_threshold_mean": ("max", "mean env steps to the threshold (not reached = budget)"),
    "training_return_mean": ("min", "mean training return over the run"),
}


class BandsError(ValueError):
    """The bands file or the result cannot be read as one."""


# -- what a run measured ----------------------------------------------------------------------------
def seed_metrics(record: TrainingRecord, threshold: float) -> dict[str, Any]:
    """One seed's entry of a row's ``per_seed``."""
    hit = record.reached(threshold)
    return {
        "seed": record.seed,
        "env_steps": record.env_steps,
        "wall_s": round(record.wall_seconds, 3),
        "final_return": record.final_return,
        "steps_to_threshold": None if hit is None else hit.env_steps,
        "training_return": record.training_return(),
    }


def row_metrics(row: GateRow, per_seed: Sequence[Mapping[str, Any]], threshold: float, env_id: str) -> dict[str, Any]:
    """The gate's metrics for one row from its seeds' entries (``seed_metrics``)."""
    steps = [s["steps_to_threshold"] if s["steps_to_threshold"] is not None else row.budget for s in per_seed]
    return {
        "budget": row.budget,
        "seeds": [s["seed"] for s in per_seed],
        "overrides": list(row.overrides),
        "env_id": env_id,
        "threshold": threshold,
        "final_return_mean": statistics.fmean(s["final_return"] for s in per_seed),
        "reached": sum(s["steps_to_threshold"] is not None for s in per_seed),
        "steps_to_threshold_mean": statistics.fmean(steps),
        "training_return_mean": statistics.fmean(s["training_return"] for s in per_seed),
        "wall_s_total": round(sum(s["wall_s"] for s in per_seed), 3),
        "per_seed": [dict(s) for s in per_seed],
    }


def own_seeds(name: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A row's metrics over its own seeds only, from a result on more seeds."""
    row = GATE_ROWS[name]
    at = GateRow(row.config, metrics["budget"], tuple(metrics["overrides"]), row.seeds)
    mine = [s for s in metrics["per_seed"] if s["seed"] in row.seeds]
    return row_metrics(at, mine, metrics["threshold"], metrics["env_id"])


# -- the bands ----------------------------------------------------------------------------------------
def calibration_summary(metrics: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """What the bands file keeps of a row's calibration (its metrics on the calibration seeds)."""
    budget, per_seed = metrics["budget"], metrics["per_seed"]
    returns = [s["final_return"] for s in per_seed]
    steps = [budget if s["steps_to_threshold"] is None else s["steps_to_threshold"] for s in per_seed]
    curve = [s["training_return"] for s in per_seed]
    return {
        "seeds": [s["seed"] for s in per_seed],
        "final_return_mean": round(statistics.fmean(returns), 2),
        "final_return_std": round(statistics.stdev(returns), 2),
        "steps_to_threshold_mean": round(statistics.fmean(steps), 1),
        "steps_to_threshold_std": round(statistics.stdev(steps), 1),
        "training_return_mean": round(statistics.fmean(curve), 2),
        "training_return_std": round(statistics.stdev(curve), 2),
        "reached": f"{sum(s['steps_to_threshold'] is not None for s in per_seed)}/{len(per_seed)}",
        "command": meta["command"],
        "date": meta["date"],
    }


def measured(own: Mapping[str, Any]) -> dict[str, Any]:
    """The row's own seeds' values as the bands file keeps them beside the bands."""
    return {
        "final_return_mean": round(own["final_return_mean"], 2),
        "reached": own["reached"],
        "steps_to_threshold_mean": round(own["steps_to_threshold_mean"], 1),
        "training_return_mean": round(own["training_return_mean"], 2),
    }


def bands_for(
    row: GateRow, budget: int, env_id: str, calibration: Mapping[str, Any], own: Mapping[str, Any]
) -> dict[str, Any]:
    """A row's bands by ``MARGINS``' rules, from its calibration summary (``calibration_summary``)
    and its own seeds' values (``measured``).  Every band written can fail; a metric that can have no
    such band is under ``unbanded``, with its measured value and why."""
    z, k = MARGINS["z"], len(row.seeds)
    chance = RANDOM_RETURN[env_id]
    error = {
        metric: z * calibration[f"{metric}_std"] / math.sqrt(k)
        for metric in ("final_return", "steps_to_threshold", "training_return")
    }
    bands: dict[str, Any] = {"budget": budget, "seeds": list(row.seeds), "env_id": env_id}
    unbanded: dict[str, Any] = {}
    for metric, floor in (("final_return", "final_return_floor"), ("training_return", "training_return_floor")):
        low = min(calibration[f"{metric}_mean"], own[f"{metric}_mean"])
        bound = max(low - max(MARGINS[floor], error[metric]), chance + MARGINS[floor])
        bands[f"{metric}_mean"] = {"min": round(bound, 1), "measured": own[f"{metric}_mean"]}
    reached, runs = (int(part) for part in calibration["reached"].split("/"))
    expected = round(k * reached / runs)
    if expected - 1 >= 1:
        bands["reached"] = {"min": expected - 1, "measured": own["reached"]}
    else:
        why = f"{reached}/{runs} calibration seeds reached the threshold: {k * reached / runs:.2g} of {k} expected"
        unbanded["reached"] = {"measured": own["reached"], "why": why + ", too few to require one"}
    high = max(calibration["steps_to_threshold_mean"], own["steps_to_threshold_mean"])
    steps_max = round(high + max(MARGINS["steps_floor"] * budget, error["steps_to_threshold"]))
    if steps_max < budget:
        bands["steps_to_threshold_mean"] = {"max": steps_max, "measured": own["steps_to_threshold_mean"]}
    else:
        unbanded["steps_to_threshold_mean"] = {
            "measured": own["steps_to_threshold_mean"],
            "why": f"the band would be {steps_max:,}, at or past the budget {budget:,}, which a seed that "
            "never reaches the threshold counts as",
        }
    if unbanded:
        bands["unbanded"] = unbanded
    return {**bands, "calibration": dict(calibration)}


def derive_bands(result: Mapping[str, Any]) -> dict[str, Any]:
    """Each row's bands from a calibration result (every row run on seeds 0..n-1, a superset of the
    row's own), through the same rounded summary the file keeps, so ``rederive`` gives them again."""
    rows = {}
    for name, metrics in result["rows"].items():
        calibration = calibration_summary(metrics, result["meta"])
        own = measured(own_seeds(name, metrics))
        rows[name] = bands_for(GATE_ROWS[name], metrics["budget"], metrics["env_id"], calibration, own)
    return rows


def rederive(bands: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The bands that ``MARGINS``' rules give for the calibrations and measured values recorded in
    ``bands`` (a bands file's content): no runs."""
    rows = {}
    for name, band in bands["rows"].items():
        if name not in GATE_ROWS:
            raise BandsError(f"the bands file has a row {name!r} the gate does not; rows: {', '.join(GATE_ROWS)}")
        entries = {**band.get("unbanded", {}), **{m: band[m] for m in METRICS if m in band}}
        own = {metric: entries[metric]["measured"] for metric in METRICS}
        rows[name] = bands_for(GATE_ROWS[name], band["budget"], band["env_id"], band["calibration"], own)
    return rows


def bands_document(rows: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The bands file's content: what it is, who wrote it, the margins and the rows."""
    return {
        "about": (
            "Accepted ranges for the learning gate (`python -m msrl.app.gate`), each a bound on a mean over "
            "the row's seeds. Written by `" + REFRESH_COMMAND + f"` from seeds 0..{CALIBRATION_SEEDS - 1} "
            "of every row (`calibration`); `measured` is the row's own seeds' value. Every band can fail: "
            "a metric that can have no such band is left out and `unbanded` says why. Refresh after a "
            "change that is meant to move them, and say why in the commit (`--configs` refreshes some "
            "rows and keeps the others; each row's `calibration` names the command and date that wrote "
            "it, `measured_with` the last one; `--rederive` applies changed rules to the recorded "
            "calibrations). Margins: see MARGINS in msrl/app/gate/_rows.py."
        ),
        "measured_with": dict(meta),
        "margins": MARGINS,
        "random_return": RANDOM_RETURN,
        "rows": dict(rows),
    }


# -- the comparison -----------------------------------------------------------------------------------
def load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BandsError(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict) or not data["rows"]:
        raise BandsError(f"{what} {path} has no 'rows' mapping")
    return data


def check_bands(result: Mapping[str, Any], bands: Mapping[str, Any]) -> list[str]:
    """Every way ``result`` falls outside ``bands``, one line each naming the row, the metric, the
    value and the bound; empty when it is inside them all.  A row of the bands that the result lacks,
    or ran at another budget or seeds, is a failure too (the bands would not apply)."""
    failures = []
    for name, band in bands["rows"].items():
        got = result["rows"].get(name)
        if got is None:
            failures.append(f"{name}: missing from the result (the bands have it)")
            continue
        for key in ("budget", "seeds"):
            if key in band and got.get(key) != band[key]:
                failures.append(
                    f"{name}: ran with {key} {got.get(key)}, the bands are for {band[key]} (refresh: {REFRESH_COMMAND})"
                )
        for metric, (side, label) in METRICS.items():
            if metric not in band:
                continue
            bound = band[metric][side]
            value = got.get(metric)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                failures.append(f"{name}: {metric} ({label}) is {value!r}, not a number")
            elif (side == "min" and value < bound) or (side == "max" and value > bound):
                word = "below" if side == "min" else "above"
                failures.append(
                    f"{name}: {metric} ({label}) = {value:g}, {word} the band's {side} {bound:g} "
                    f"(measured {band[metric].get('measured', '?')} when the bands were written)"
                )
    return failures


def gate_table(result: Mapping[str, Any], bands: Mapping[str, Any] | None) -> str:
    """A markdown table of the rows, with the bands beside each value where there are bands."""
    lines = [
        (
            "| row | budget | seeds | final greedy return (mean) | reached | env steps to threshold (mean) "
            "| training return (mean) | wall s |"
        ),
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, m in result["rows"].items():
        band = (bands or {}).get("rows", {}).get(name, {})

        def cell(metric: str, fmt: str, m: Mapping[str, Any] = m, band: Mapping[str, Any] = band) -> str:
            side = METRICS[metric][0]
            text = format(m[metric], fmt)
            if metric in band:
                text += f" ({'≥' if side == 'min' else '≤'} {format(band[metric][side], fmt)})"
            return text

        lines.append(
            f"| {name} | {m['budget']:,} | {','.join(map(str, m['seeds']))} | {cell('final_return_mean', '.1f')} | "
            f"{cell('reached', 'd')}/{len(m['seeds'])} | {cell('steps_to_threshold_mean', ',.0f')} | "
            f"{cell('training_return_mean', '.1f')} | "
            f"{m['wall_s_total']:.1f} |"
        )
    return "\n".join(lines)
