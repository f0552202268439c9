"""``python -m benchmarks.learning_quality --merge DIR ...``: one table, one CSV set and one plot per
config from runs made in separate processes (msrl and SB3 side by side on two cores, or seeds added
later with ``--first-seed``), read back from each run's ``curves.json``.

The runs of a config must share its budget, and no (config, framework, seed) may appear twice: a
merge that would mix budgets or count a seed twice is an error naming the directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.learning_quality._report import markdown_table, plot, sources_text, summarize, write_outputs
from benchmarks.learning_quality._specs import FRAMEWORKS, SPECS
from msrl.app.gate import WINDOW, EpisodeBatch, TrainingRecord


class MergeError(ValueError):
    """A set of run directories that cannot be merged; the message names why."""


def load_runs(directory: Path) -> tuple[dict[str, Any], list[TrainingRecord]]:
    """A run directory's ``meta`` and its runs, as ``benchmarks.learning_quality`` wrote them to ``curves.json``."""
    path = directory / "curves.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        runs = [
            TrainingRecord(
                config=run["config"],
                framework=run["framework"],
                seed=int(run["seed"]),
                env_steps=int(run["env_steps"]),
                wall_seconds=float(run["wall_seconds"]),
                eval_returns=[float(x) for x in run["eval_returns"]],
                episodes=[EpisodeBatch(int(s), float(w), float(r), int(c)) for s, w, r, c in run["episodes"]],
            )
            for run in data["runs"]
        ]
        meta = data["meta"]
    except FileNotFoundError:
        raise MergeError(
            f"{directory} has no curves.json (give directories benchmarks.learning_quality wrote with --out)"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise MergeError(f"{path} is not a learning_quality result: {type(exc).__name__}: {exc}") from None
    unknown = sorted({r.config for r in runs} - set(SPECS))
    if unknown:
        raise MergeError(f"{path} has runs of unknown config {unknown[0]!r}; valid choices: {', '.join(SPECS)}")
    strange = sorted({r.framework for r in runs} - set(FRAMEWORKS))
    if strange:
        raise MergeError(f"{path} has runs of unknown framework {strange[0]!r}; valid: {', '.join(FRAMEWORKS)}")
    return meta, runs


def merge(directories: list[Path], out: Path) -> str:
    """Writes the merged outputs into ``out`` and returns the markdown it wrote to ``summary.md``."""
    budgets: dict[str, tuple[int, Path]] = {}
    seen: dict[tuple[str, str, int], Path] = {}
    results: list[TrainingRecord] = []
    commands: list[str] = []
    eval_episodes: set[int] = set()
    for directory in directories:
        meta, runs = load_runs(directory)
        commands.append(str(meta.get("command", directory)))
        for config, about in meta.get("configs", {}).items():
            budget = int(about["budget"])
            earlier = budgets.setdefault(config, (budget, directory))
            if earlier[0] != budget:
                raise MergeError(
                    f"{config}: budget {earlier[0]:,} in {earlier[1]} but {budget:,} in {directory}; "
                    "merge runs of one budget"
                )
        for r in runs:
            key = (r.config, r.framework, r.seed)
            if key in seen:
                raise MergeError(f"{r.config} {r.framework} seed {r.seed} is in both {seen[key]} and {directory}")
            seen[key] = directory
            eval_episodes.add(len(r.eval_returns))
            results.append(r)
    if not results:
        raise MergeError("no runs in " + ", ".join(str(d) for d in directories))
    order = list(SPECS)  # as one interleaved run lists them: config, seed, framework
    results.sort(key=lambda r: (order.index(r.config), r.seed, FRAMEWORKS.index(r.framework)))
    rows = []
    configs = [c for c in SPECS if any(r.config == c for r in results)]
    for config in configs:
        spec, budget = SPECS[config], budgets[config][0]
        mine = [r for r in results if r.config == config]
        rows.extend(
            summarize(config, spec, f, [r for r in mine if r.framework == f], budget)
            for f in FRAMEWORKS
            if any(r.framework == f for r in mine)
        )
        plot(config, spec, mine, budget, out / f"{config}.png")
    episodes = "/".join(str(n) for n in sorted(eval_episodes))
    header = (
        f"Learning quality, msrl vs SB3, merged from {len(directories)} runs: final greedy return over {episodes} "
        f"fresh episodes (mean ± std over seeds), threshold on the mean of the last {WINDOW} training episodes."
    )
    table = "\n\n".join(
        [header, markdown_table(rows), sources_text(configs), "Runs:\n" + "\n".join(f"- `{c}`" for c in commands)]
    )
    meta = {
        "merged_from": [str(d) for d in directories],
        "commands": commands,
        "window": WINDOW,
        "configs": {config: {"budget": budgets[config][0]} for config in configs},  # so a merge merges again
    }
    write_outputs(out, rows, results, meta, table)
    return table


__all__ = ["MergeError", "load_runs", "merge"]
