"""What ``benchmarks.learning_quality`` writes: the summary rows and markdown table, the curves' plot, the CSV
and JSON files, and the machine it ran on."""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.learning_quality._specs import FRAMEWORKS, PUBLISHED, SPECS, THRESHOLDS, Spec
from msrl.app.gate import WINDOW, TrainingRecord


# -- summary ----------------------------------------------------------------------------------------
def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def framework_label(spec: Spec, framework: str) -> str:
    if framework == "msrl":
        return f"msrl {spec.msrl_algo}"
    if spec.settings_source == "rl-zoo":
        return f"SB3 {spec.sb3_algo} (rl-zoo {spec.zoo_env})"
    return f"SB3 {spec.sb3_algo} ({spec.zoo_env})"  # e.g. "CartPole-v1 at CleanRL dqn.py's settings"


def summarize(
    config: str, spec: Spec, framework: str, results: Sequence[TrainingRecord], budget: int
) -> dict[str, Any]:
    threshold = THRESHOLDS[spec.env_id]
    hits = [r.reached(threshold) for r in results]
    reached = [h for h in hits if h is not None]
    final_mean, final_std = _mean_std([r.final_return for r in results])
    wall_mean, wall_std = _mean_std([r.wall_seconds for r in results])
    return {
        "config": config,
        "env_id": spec.env_id,
        "framework": framework,
        "label": framework_label(spec, framework),
        "seeds": len(results),
        "budget": budget,
        "env_steps_mean": statistics.fmean(r.env_steps for r in results),
        "final_return_mean": final_mean,
        "final_return_std": final_std,
        "wall_s_mean": wall_mean,
        "wall_s_std": wall_std,
        "threshold": threshold,
        "reached": len(reached),
        "seconds_to_threshold_mean": statistics.fmean(h.wall_seconds for h in reached) if reached else None,
        "steps_to_threshold_mean": statistics.fmean(h.env_steps for h in reached) if reached else None,
    }


def _published_cell(config: str) -> str:
    refs = PUBLISHED.get(config, [])
    parts = [f"{p.source}: {p.figure}" + (f" @ {p.budget}" if p.budget and p.figure != "n/a" else "") for p in refs]
    return "; ".join(parts) or "n/a"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        (
            "| config | framework | env steps | final greedy return | wall s | wall s to threshold "
            "| env steps to threshold "
            "| reached | published (mean ± std @ training steps) |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    shown: set[str] = set()
    for row in rows:
        first = row["config"] not in shown
        shown.add(row["config"])
        config = f"{row['config']} ({row['env_id']}, ≥ {row['threshold']:g})" if first else ""
        seconds = "—" if row["seconds_to_threshold_mean"] is None else f"{row['seconds_to_threshold_mean']:,.1f}"
        steps = "—" if row["steps_to_threshold_mean"] is None else f"{row['steps_to_threshold_mean']:,.0f}"
        lines.append(
            f"| {config} | {row['label']} | {row['env_steps_mean']:,.0f} | "
            f"{row['final_return_mean']:.1f} ± {row['final_return_std']:.1f} | "
            f"{row['wall_s_mean']:,.1f} ± {row['wall_s_std']:.1f} | "
            f"{seconds} | {steps} | {row['reached']}/{row['seeds']} | "
            f"{_published_cell(row['config']) if first else ''} |"
        )
    return "\n".join(lines)


def sources_text(configs: Sequence[str]) -> str:
    lines = ["Published figures:"]
    for config in configs:
        for p in PUBLISHED.get(config, []):
            figure = p.figure if p.figure == "n/a" else f"{p.figure} after {p.budget} steps"
            lines.append(f"- {config}: {p.source}: {figure} ({p.note}) <{p.url}>")
    return "\n".join(lines)


# -- output -----------------------------------------------------------------------------------------
def plot(config: str, spec: Spec, results: Sequence[TrainingRecord], budget: int, path: Path) -> None:
    """Two panels (return vs env steps, vs wall seconds): per framework the mean over seeds of the
    rolling mean of 10 episodes on a common grid, with a min-max band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    colours = {"msrl": "tab:blue", "sb3": "tab:orange"}
    threshold = THRESHOLDS[spec.env_id]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    seeds = sorted({r.seed for r in results})
    for framework in FRAMEWORKS:
        curves = [r.curve() for r in results if r.framework == framework]
        curves = [c for c in curves if c]
        if not curves:
            continue
        label = f"{framework_label(spec, framework)}, {len(curves)} seed{'s' if len(curves) > 1 else ''}"
        for ax, attr in zip(axes, ("env_steps", "wall_seconds")):
            xs = [np.array([getattr(p, attr) for p in c], dtype=float) for c in curves]
            ys = [np.array([p.rolling_return for p in c], dtype=float) for c in curves]
            lo, hi = max(x[0] for x in xs), min(x[-1] for x in xs)
            if hi <= lo:  # seeds do not overlap: show each seed's own curve
                for i, (x, y) in enumerate(zip(xs, ys)):
                    ax.plot(x, y, color=colours[framework], label=label if i == 0 else None)
                continue
            grid = np.linspace(lo, hi, 300)
            stack = np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys)])
            ax.plot(grid, stack.mean(axis=0), color=colours[framework], linewidth=2, label=label)
            if max(len(x) for x in xs) < 40:  # few points (msrl: one per iteration): show where they are
                for x, y in zip(xs, ys):
                    ax.plot(x, y, linestyle="none", marker=".", color=colours[framework], alpha=0.6)
            ax.fill_between(
                grid, stack.min(axis=0), stack.max(axis=0), color=colours[framework], alpha=0.2, linewidth=0
            )
    for ax, xlabel in zip(axes, ("env steps", "wall time [s]")):
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"episode return (mean of last {WINDOW} training episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    axes[0].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_steps_label))
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}"
    fig.suptitle(f"{config}: {spec.env_id}, budget {budget:,} env steps, {seed_text}; mean over seeds, band = min–max")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _steps_label(x: float, _pos: Any = None) -> str:
    """Env-step ticks as 50k, 1.5M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    return f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def write_outputs(
    out: Path, rows: list[dict[str, Any]], results: list[TrainingRecord], meta: dict[str, Any], table: str
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(table + "\n", encoding="utf-8")
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["config"])
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "runs.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "config",
                "framework",
                "seed",
                "env_steps",
                "wall_s",
                "final_greedy_return",
                "eval_episodes",
                "training_episodes",
                "threshold",
                "wall_s_to_threshold",
                "env_steps_to_threshold",
            ]
        )
        for r in results:
            hit = r.reached(THRESHOLDS[SPECS[r.config].env_id])
            writer.writerow(
                [
                    r.config,
                    r.framework,
                    r.seed,
                    r.env_steps,
                    f"{r.wall_seconds:.3f}",
                    f"{r.final_return:.3f}",
                    len(r.eval_returns),
                    sum(b.count for b in r.episodes),
                    THRESHOLDS[SPECS[r.config].env_id],
                    "" if hit is None else f"{hit.wall_seconds:.3f}",
                    "" if hit is None else hit.env_steps,
                ]
            )
    curves = {
        "meta": meta,
        "runs": [
            {
                **{k: v for k, v in asdict(r).items() if k != "episodes"},
                "episodes": [[b.env_steps, round(b.wall_seconds, 4), b.mean_return, b.count] for b in r.episodes],
                "episodes_columns": ["env_steps", "wall_seconds", "mean_return", "count"],
            }
            for r in results
        ],
    }
    (out / "curves.json").write_text(json.dumps(curves), encoding="utf-8")


def jsonable(value: Any) -> Any:
    """Numbers, strings and containers as they are; anything else (schedules, classes) as its repr."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def machine_info() -> str:
    return harness.machine_info(("torch", "gymnasium", "stable-baselines3", "mujoco"))
