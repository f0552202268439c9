"""Learning curves and time splits as PNG files (matplotlib, no display needed): what
``msrl plot`` draws from finished runs and ``msrl compare`` from its combinations.

A curve is one run's per-iteration records (``metrics.jsonl``); a group is the curves of one
combination over several seeds, drawn as their mean with a band from the lowest to the highest
seed, each seed interpolated onto the group's common x values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

X_AXES = {"steps": ("env_steps", "environment steps"), "time": ("wall_time", "training wall-clock time (s)")}
"""``--x`` choice -> (how x is read from the records, the axis label with its unit)."""

LINE_STYLES = ("-", "--", "-.", ":")
PHASE_COLOURS = {
    "env": "#4C72B0",
    "inference": "#55A868",
    "buffer": "#8172B2",
    "learn": "#C44E52",
    "communication": "#CCB974",
    "other": "#999999",
}


def curve(records: Sequence[Mapping[str, Any]], x: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of one run: x is cumulative training wall time (``time``) or env steps
    (``steps``); iterations where ``metric`` is missing or not finite (no episode ended) are left out."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    xs, ys, elapsed = [], [], 0.0
    for record in records:
        elapsed += float(record.get("wall_time", 0.0))
        value = record.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            xs.append(elapsed if x == "time" else float(record["env_steps"]))
            ys.append(float(value))
    return np.asarray(xs), np.asarray(ys)


def _band(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, lowest and highest of several curves on a common grid over the x range they all cover."""
    start = max(c[0][0] for c in curves)
    stop = min(c[0][-1] for c in curves)
    grid = np.linspace(start, stop, 200) if stop > start else np.asarray([start])
    values = np.stack([np.interp(grid, cx, cy) for cx, cy in curves])
    return grid, values.mean(0), values.min(0), values.max(0)


def plot_curves(
    groups: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
    path: str | os.PathLike,
    *,
    x: str = "steps",
    metric: str = "episode_return",
    title: str = "",
) -> str:
    """Draw one line per group (its runs' mean, with a min-max band over seeds when it has several)
    into the PNG ``path``; returns the path.  Groups with no finite value are listed as such."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for index, (label, runs) in enumerate(groups.items()):
        style = LINE_STYLES[index % len(LINE_STYLES)]  # combinations that learn alike stay visible on top of each other
        curves = [c for c in (curve(records, x, metric) for records in runs) if len(c[0])]
        if not curves:
            ax.plot([], [], label=f"{label} (no {metric})")
            continue
        if len(curves) == 1:
            ax.plot(*curves[0], label=label, linewidth=1.6, linestyle=style)
            continue
        grid, mean, low, high = _band(curves)
        (line,) = ax.plot(grid, mean, label=f"{label} (mean of {len(curves)} seeds)", linewidth=1.6, linestyle=style)
        ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(X_AXES[x][1])
    ax.set_ylabel(f"{metric.replace('_', ' ')} (training episodes)")
    ax.set_title(title or f"{metric.replace('_', ' ')} vs {X_AXES[x][1].split(' (')[0]}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return os.fspath(path)


def plot_time_split(
    split: Mapping[str, Mapping[str, float]],
    path: str | os.PathLike,
    *,
    title: str = "",
    wall: Mapping[str, float] | None = None,
) -> str:
    """A stacked bar per combination: mean seconds per iteration spent in each phase (the slowest
    replica's), with the iteration's wall time marked when ``wall`` gives it: replicas run their
    phases side by side, so the stack can rise above the wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(split)
    phases = [p for p in PHASE_COLOURS if any(split[label].get(p, 0.0) > 0 for label in labels)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(labels) + 2), 5), dpi=110)
    bottom = np.zeros(len(labels))
    for phase in phases:
        heights = np.asarray([split[label].get(phase, 0.0) for label in labels]) * 1000.0
        ax.bar(range(len(labels)), heights, bottom=bottom, label=phase, color=PHASE_COLOURS[phase])
        bottom += heights
    if wall:
        ax.scatter(
            range(len(labels)),
            [wall.get(label, 0.0) * 1000.0 for label in labels],
            marker="_",
            s=900,
            color="black",
            linewidths=2.5,
            zorder=3,
            label="wall time per iteration",
        )
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("milliseconds per iteration (slowest replica per phase)")
    ax.set_title(title or "Where an iteration's time goes")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return os.fspath(path)
