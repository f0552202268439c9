"""The learning regression gate behind ``learning.py --quick``: the quick rows (CartPole at reduced
budgets, fixed seeds, the synchronous ``local`` policy, every setting that decides the cost pinned
here rather than read from the shipped config), what a quick run measures per row, the stored bands
(``benchmarks/learning_bands.json``) and the comparison of a result with them.

A row's metrics, over its seeds: the mean final greedy return, how many seeds reached the threshold
(CartPole 475 on the mean of the last 10 training episodes), the mean env steps to the threshold
with a seed that never reached it counted at its full budget (so the mean is always defined and a
seed that stops reaching it makes it worse), and the mean training return over the run (the
learning curve's average).  A band is a bound on each: ``min`` for the returns and the count,
``max`` for the steps.  ``--write-bands`` runs every row on more seeds (``CALIBRATION_SEEDS``) and
sets each band from their spread (``MARGINS``); the bands file keeps the row's own measured values
and the calibration beside the bands."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _learning_gate_rows import CALIBRATION_SEEDS, MARGINS, QUICK_ROWS, QuickRow

REPO_ROOT = Path(__file__).resolve().parents[1]
BANDS_FILE = REPO_ROOT / "benchmarks" / "learning_bands.json"
QUICK_OUT = REPO_ROOT / "benchmarks" / "results" / "learning-quick"
QUICK_EVAL_EPISODES = 10
REFRESH_COMMAND = "python benchmarks/learning.py --quick --write-bands"

METRICS = {
    "final_return_mean": ("min", "mean final greedy return"),
    "reached": ("min", "seeds reaching the threshold"),
    "steps_to_threshold_mean": ("max", "mean env steps to the threshold (not reached = budget)"),
    "training_return_mean": ("min", "mean training return over the run"),
}


# -- what a run measured ----------------------------------------------------------------------------
def training_return(run: Any) -> float:
    """The run's learning curve averaged over its env steps: the rolling mean of the last 10
    training episodes, each value weighted by the env steps until the next (0 before the first
    episode ends).  Smoother than the steps to the threshold: it moves with the whole curve."""
    if isinstance(getattr(run, "training_return", None), float):  # a seed read back from a result
        return float(run.training_return)
    total, previous, value = 0.0, 0, 0.0
    for point in run.curve():
        total += value * (point.env_steps - previous)
        previous, value = point.env_steps, point.rolling_return
    total += value * max(0, run.env_steps - previous)
    return total / run.env_steps if run.env_steps else float("nan")


def row_metrics(row: QuickRow, results: Sequence[Any], threshold: float) -> dict[str, Any]:
    """The gate's metrics for one row from its ``RunResult``s (one per seed)."""
    per_seed = []
    for r in results:
        hit = r.reached(threshold)
        per_seed.append(
            {
                "seed": r.seed,
                "env_steps": r.env_steps,
                "wall_s": round(r.wall_seconds, 3),
                "final_return": r.final_return,
                "steps_to_threshold": None if hit is None else hit.env_steps,
                "training_return": training_return(r),
            }
        )
    steps = [s["steps_to_threshold"] if s["steps_to_threshold"] is not None else row.budget for s in per_seed]
    return {
        "budget": row.budget,
        "seeds": [s["seed"] for s in per_seed],
        "overrides": list(row.overrides),
        "threshold": threshold,
        "final_return_mean": statistics.fmean(s["final_return"] for s in per_seed),
        "reached": sum(s["steps_to_threshold"] is not None for s in per_seed),
        "steps_to_threshold_mean": statistics.fmean(steps),
        "training_return_mean": statistics.fmean(s["training_return"] for s in per_seed),
        "wall_s_total": round(sum(s["wall_s"] for s in per_seed), 3),
        "per_seed": per_seed,
    }


def derive_bands(result: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Bands from a calibration result (each row run on seeds 0..n-1, a superset of the row's own),
    with ``MARGINS``; each band keeps the row's own seeds' value as ``measured`` beside it."""
    z, rows = MARGINS["z"], {}
    for name, cal in result["rows"].items():
        row = QUICK_ROWS[name]
        k, budget, per_seed = len(row.seeds), cal["budget"], cal["per_seed"]
        own = own_seeds(name, cal)
        returns = [s["final_return"] for s in per_seed]
        steps = [budget if s["steps_to_threshold"] is None else s["steps_to_threshold"] for s in per_seed]
        spread = {"returns": statistics.stdev(returns), "steps": statistics.stdev(steps)}
        low = min(statistics.fmean(returns), own["final_return_mean"])
        high = max(statistics.fmean(steps), own["steps_to_threshold_mean"])
        curve = [s["training_return"] for s in per_seed]
        share = sum(s["steps_to_threshold"] is not None for s in per_seed) / len(per_seed)
        rows[name] = {
            "budget": budget,
            "seeds": list(row.seeds),
            "final_return_mean": {
                "min": round(low - max(MARGINS["final_return_floor"], z * spread["returns"] / math.sqrt(k)), 1),
                "measured": round(own["final_return_mean"], 2),
            },
            "reached": {"min": max(0, round(k * share) - 1), "measured": own["reached"]},
            "steps_to_threshold_mean": {
                "max": round(
                    min(budget, high + max(MARGINS["steps_floor"] * budget, z * spread["steps"] / math.sqrt(k)))
                ),
                "measured": round(own["steps_to_threshold_mean"], 1),
            },
            "training_return_mean": {
                "min": round(
                    min(statistics.fmean(curve), own["training_return_mean"])
                    - max(MARGINS["training_return_floor"], z * statistics.stdev(curve) / math.sqrt(k)),
                    1,
                ),
                "measured": round(own["training_return_mean"], 2),
            },
            "calibration": {
                "seeds": [s["seed"] for s in per_seed],
                "final_return_mean": round(statistics.fmean(returns), 2),
                "final_return_std": round(spread["returns"], 2),
                "steps_to_threshold_mean": round(statistics.fmean(steps), 1),
                "steps_to_threshold_std": round(spread["steps"], 1),
                "training_return_mean": round(statistics.fmean(curve), 2),
                "training_return_std": round(statistics.stdev(curve), 2),
                "reached": f"{sum(s['steps_to_threshold'] is not None for s in per_seed)}/{len(per_seed)}",
                "command": meta["command"],
                "date": meta["date"],
            },
        }
    return {
        "about": (
            "Accepted ranges for `python benchmarks/learning.py --quick` (the learning regression gate), each a "
            "bound on a mean over the row's seeds. Written by `" + REFRESH_COMMAND + "` from seeds 0.."
            f"{CALIBRATION_SEEDS - 1} of every row (`calibration`); `measured` is the row's own seeds' value. "
            "Refresh after a change that is meant to move them, and say why in the commit (`--configs` "
            "refreshes some rows and keeps the others; each row's `calibration` names the command and date "
            "that wrote it, `measured_with` the last one). Margins: see MARGINS in "
            "benchmarks/_learning_gate_rows.py."
        ),
        "measured_with": meta,
        "margins": MARGINS,
        "rows": rows,
    }


@dataclass
class _Seed:
    """A seed's record read back from a result, with what ``row_metrics`` asks of a run."""

    seed: int
    env_steps: int
    wall_s: float
    final_return: float
    steps_to_threshold: int | None
    training_return: float = float("nan")

    @property
    def wall_seconds(self) -> float:
        return self.wall_s

    def reached(self, threshold: float) -> Any:
        """Where the run first reached the threshold: something with its ``env_steps``, or None."""
        return None if self.steps_to_threshold is None else SimpleNamespace(env_steps=self.steps_to_threshold)


# -- the comparison -----------------------------------------------------------------------------------
class BandsError(ValueError):
    """The bands file or the result cannot be read as one."""


def load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BandsError(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict) or not data["rows"]:
        raise BandsError(f"{what} {path} has no 'rows' mapping")
    return data


def check_bands(result: dict[str, Any], bands: dict[str, Any]) -> list[str]:
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


def gate_table(result: dict[str, Any], bands: dict[str, Any] | None) -> str:
    """A markdown table of the quick rows, with the bands beside each value when there are bands."""
    lines = [
        (
            "| row | budget | seeds | final greedy return (mean) | reached | env steps to threshold (mean) "
            "| training return (mean) | wall s |"
        ),
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, m in result["rows"].items():
        band = (bands or {}).get("rows", {}).get(name, {})

        def cell(metric: str, fmt: str, m: dict[str, Any] = m, band: dict[str, Any] = band) -> str:
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


# -- the quick run ------------------------------------------------------------------------------------
def run_quick(
    names: Sequence[str],
    out: Path,
    command: str,
    bands_path: Path,
    write: bool,
    seeds: Sequence[int] | None = None,
    budget: int | None = None,
) -> int:
    """Run the quick rows ``names`` (with ``seeds`` and ``budget`` instead of each row's own when
    given: for trying things out, the bands then do not apply), write
    ``quick.json`` and ``quick.md`` under ``out``, then compare with the bands (or, with ``write``,
    refresh them from this run).  Returns the exit status: 0 inside the bands, 1 outside."""
    import dataclasses
    import tempfile
    import time

    from _learning_report import machine_info
    from _learning_runs import run_msrl
    from _learning_specs import SPECS, THRESHOLDS

    meta = {"command": command, "machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    print(f"command: {command}\nmachine: {meta['machine']}\n", flush=True)
    result: dict[str, Any] = {"meta": meta, "eval_episodes": QUICK_EVAL_EPISODES, "rows": {}}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="msrl-quick-", dir=out) as runs_dir:
        for name in names:
            run_seeds = seeds
            if write:  # the calibration: the row's own seeds among 0..n-1
                extra = range(CALIBRATION_SEEDS) if seeds is None else seeds
                run_seeds = tuple(sorted(set(extra) | set(QUICK_ROWS[name].seeds)))
            row = QUICK_ROWS[name]
            row = row if run_seeds is None else dataclasses.replace(row, seeds=tuple(run_seeds))
            row = row if budget is None else dataclasses.replace(row, budget=budget)
            threshold = THRESHOLDS[SPECS[row.config].env_id]
            print(f"== {name}: budget {row.budget:,} env steps, seeds {list(row.seeds)}", flush=True)
            results = []
            for seed in row.seeds:
                r = run_msrl(row.config, seed, row.budget, QUICK_EVAL_EPISODES, runs_dir, row.overrides)
                hit = r.reached(threshold)
                where = "not reached" if hit is None else f"reached at {hit.env_steps:,} steps"
                print(f"  seed {seed}: {r.wall_seconds:6.1f} s  greedy {r.final_return:6.1f}  {where}", flush=True)
                results.append(r)
            result["rows"][name] = row_metrics(row, results, threshold)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    if write:
        (out / "calibration.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        write_bands(result, bands_path)
        result["rows"] = {name: own_seeds(name, m) for name, m in result["rows"].items()}
    (out / "quick.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    bands = load_json(bands_path, "bands file") if bands_path.exists() else None
    table = gate_table(result, bands)
    (out / "quick.md").write_text(table + f"\n\n`{command}` -- {meta['machine']}\n", encoding="utf-8")
    print(f"\n{table}\n\nquick run: {result['wall_s']:.0f} s; wrote {out}/quick.json and quick.md")
    if bands is None:
        print(f"no bands file at {bands_path}: nothing compared (write one: {REFRESH_COMMAND})")
        return 0
    selected = {"rows": {k: v for k, v in bands["rows"].items() if k in names}}
    return report(check_bands(result, selected), bands_path)


def write_bands(calibration: dict[str, Any], bands_path: Path) -> None:
    """Write the bands derived from ``calibration`` (a quick result on the calibration seeds) into
    ``bands_path``, keeping the rows it does not hold from the file there."""
    old = load_json(bands_path, "bands file") if bands_path.exists() else {"rows": {}}
    new = derive_bands(calibration, calibration["meta"])
    new["rows"] = {**{k: v for k, v in old["rows"].items() if k in QUICK_ROWS}, **new["rows"]}
    bands_path.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote the bands for {', '.join(calibration['rows'])} to {bands_path}")


def own_seeds(name: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """A row's metrics over its own seeds only, from a result on more seeds."""
    row = QUICK_ROWS[name]
    row = QuickRow(row.config, metrics["budget"], tuple(metrics["overrides"]), row.seeds)
    runs = [_Seed(**s) for s in metrics["per_seed"] if s["seed"] in row.seeds]
    return row_metrics(row, runs, metrics["threshold"])


def report(failures: list[str], bands_path: Path) -> int:
    """Print the comparison's outcome; the exit status (1 when anything is outside the bands)."""
    if not failures:
        print(f"learning gate: every row inside the bands of {bands_path}")
        return 0
    print(f"learning gate: FAILED against {bands_path}:")
    for line in failures:
        print(f"  {line}")
    return 1
