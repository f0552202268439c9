"""TD3 and DDPG on HalfCheetah-v5 at 1M env steps: the figures ``BENCHMARKS.md`` gives, read from
finished ``msrl train`` run directories.  A 1M run is 1.5-3 hours of a core on the 2-core VM and is
resumed from its checkpoints across sittings, so ``msrl train`` makes the runs and this module reads
them back:

    msrl train configs/td3_halfcheetah.yaml --set seed=3 --set runs_dir=runs/td3_s3
    python -m benchmarks.halfcheetah_1m runs/*/td3_halfcheetah runs/*/ddpg_halfcheetah --figures benchmarks/figures

Per run: the greedy return (``eval.json``, the config's ``eval_episodes``); the mean of the last 100
training episodes, which is CleanRL's published measure (its benchmark utility averages each seed's
last 100 episodic returns, taken with exploration noise while the policy trains); the env steps where
a training episode first passes 5,000, 9,000 and 10,000 and where the mean of the last 10 first
reaches 3,000 (the learning table's threshold); the summed training wall time.  Per config: mean ±
sample std over its seeds beside CleanRL's 3-seed figures on HalfCheetah-v4 (same dynamics as v5).
``--figures DIR`` writes each run's record as ``<config>_1m_seed<N>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness import markdown_table

CLEANRL = {"td3": (9583.22, 126.09), "ddpg": (10374.07, 157.37)}
"""CleanRL's ``td3_continuous_action.py`` and ``ddpg_continuous_action.py`` on HalfCheetah-v4, 3 seeds
(its docs, rl-algorithms/td3.md and ddpg.md, "Experiment results"): mean of the last 100 training
episodes."""

LAST = 100
RUN_COLUMNS = ["config", "seed", "greedy", f"last {LAST} training", "first episode 5k / 9k / 10k", "3,000 at", "wall s"]
MILESTONES = (5000, 9000, 10000)
THRESHOLD, WINDOW = 3000.0, 10


def training_episodes(run: Path) -> tuple[list[tuple[int, float]], float]:
    """``(env_steps, return)`` of every training episode, and the summed wall time, streamed from
    ``metrics.jsonl`` (a 1M-step run's is about 400 MB).  A resumed run's file holds each iteration
    once; where one repeats anyway, its last record counts."""
    rows: dict[int, tuple[int, float | None, float]] = {}
    with open(run / "metrics.jsonl", encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a last line cut short by an interrupted write
                continue
            if "iteration" in record:
                rows[record["iteration"]] = (
                    int(record["env_steps"]),
                    record.get("episode_return"),
                    float(record.get("wall_time", 0.0)),
                )
    ordered = [rows[k] for k in sorted(rows)]
    episodes = [(steps, float(ret)) for steps, ret, _ in ordered if ret is not None]
    return episodes, sum(wall for _, _, wall in ordered)


def summarize(run: Path) -> dict[str, Any]:
    """One finished run's record (the figure file's content)."""
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    evaluation_path = run / "eval.json"
    if not evaluation_path.exists():
        raise SystemExit(f"msrl: error: {run} has no eval.json: the run has not finished (resume it with --resume)")
    evaluation = json.loads(evaluation_path.read_text(encoding="utf-8"))
    episodes, wall = training_episodes(run)
    if len(episodes) < LAST:
        raise SystemExit(f"msrl: error: {run} has {len(episodes)} training episodes; the summary needs {LAST}")
    returns = [r for _, r in episodes]
    means = [statistics.fmean(returns[i - WINDOW + 1 : i + 1]) for i in range(WINDOW - 1, len(returns))]

    def first_at(values: Sequence[float], bar: float, lag: int = 0) -> int | None:
        """The env steps of the episode where ``values`` (lagging the episodes by ``lag``) first reach ``bar``."""
        return next((episodes[i + lag][0] for i, value in enumerate(values) if value >= bar), None)

    return {
        "config": config["name"],
        "algorithm": config["algorithm"],
        "seed": int(config["seed"]),
        "env_steps": episodes[-1][0],
        "greedy_returns": evaluation["returns"],
        "greedy_mean": evaluation["mean"],
        "train_last100_mean": statistics.fmean(returns[-LAST:]),
        "first_training_episode_at": {str(bar): first_at(returns, bar) for bar in MILESTONES},
        "last10_reaches_3000_at": first_at(means, THRESHOLD, WINDOW - 1),
        "training_episodes": [[steps, round(ret, 1)] for steps, ret in episodes],
        "wall_s": round(wall, 1),
        "date": datetime.date.fromtimestamp(evaluation_path.stat().st_mtime).isoformat(),
        "machine": "2-core VM",
    }


def spread(values: Sequence[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:,.1f} ± {statistics.stdev(values):,.1f}" if len(values) > 1 else f"{mean:,.1f}"


def report(records: Sequence[dict[str, Any]]) -> str:
    runs = [
        [
            r["config"],
            r["seed"],
            f"{r['greedy_mean']:,.1f} ± {statistics.pstdev(r['greedy_returns']):,.1f}",
            f"{r['train_last100_mean']:,.1f}",
            " / ".join(f"{v:,}" if v else "never" for v in r["first_training_episode_at"].values()),
            f"{r['last10_reaches_3000_at']:,}" if r["last10_reaches_3000_at"] else "never",
            f"{r['wall_s']:,.0f}",
        ]
        for r in sorted(records, key=lambda r: (r["config"], r["seed"]))
    ]
    configs = sorted({r["config"] for r in records})
    totals = []
    for config in configs:
        mine = [r for r in records if r["config"] == config]
        published = CLEANRL.get(mine[0]["algorithm"])
        totals.append(
            [
                config,
                len(mine),
                spread([r["greedy_mean"] for r in mine]),
                spread([r["train_last100_mean"] for r in mine]),
                f"{published[0]:,.1f} ± {published[1]:,.1f}" if published else "none",
            ]
        )
    return "\n\n".join(
        [
            markdown_table(
                RUN_COLUMNS,
                runs,
            ),
            markdown_table(
                ["config", "seeds", "greedy", f"last {LAST} training", f"CleanRL, last {LAST} training (v4, 3 seeds)"],
                totals,
            ),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.halfcheetah_1m", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="finished msrl train run directories")
    parser.add_argument("--figures", type=Path, help="write each run's record here as <config>_1m_seed<N>.json")
    args = parser.parse_args(argv)
    records = [summarize(run) for run in args.runs]
    if args.figures:
        args.figures.mkdir(parents=True, exist_ok=True)
        for r in records:
            (args.figures / f"{r['config']}_1m_seed{r['seed']}.json").write_text(json.dumps(r), encoding="utf-8")
    print(report(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
