"""``python -m msrl.app.gate``: run the gate's rows and compare them with the bands, write the bands
from a calibration, derive them again from the recorded calibrations, or compare a saved result."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msrl.app._compare import default_target
from msrl.app._config import load_config
from msrl.app.gate._bands import (
    BANDS_FILE,
    REFRESH_COMMAND,
    BandsError,
    bands_document,
    check_bands,
    derive_bands,
    gate_table,
    load_json,
    own_seeds,
    rederive,
    row_metrics,
    seed_metrics,
)
from msrl.app.gate._records import train_and_record
from msrl.app.gate._rows import CALIBRATION_SEEDS, GATE_ROWS, GateRow
from msrl.core import MsrlError

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
"""The shipped configs the rows train (a source checkout's ``configs/``)."""
DEFAULT_OUT = Path("runs") / "learning-gate"
EVAL_EPISODES = 10


def machine() -> str:
    """The machine and the versions that decide a run's arithmetic, in one line."""
    import gymnasium
    import torch

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{platform.platform()}, {platform.processor() or platform.machine()}, cpu_count {os.cpu_count()} "
        f"({usable} usable); python {platform.python_version()}, torch {torch.__version__}, "
        f"gymnasium {gymnasium.__version__}"
    )


def env_of(row: GateRow, configs: Path) -> tuple[Path, str, float]:
    """The row's config file, its environment and the threshold the row's seeds are to reach."""
    path = configs / f"{row.config}.yaml"
    if not path.exists():
        raise BandsError(f"the gate trains the shipped config {path}, which is not there (give --configs-dir)")
    env_id = str(load_config(str(path), list(row.overrides)).raw.get("algo", {}).get("env_id"))
    threshold = default_target(env_id)
    if threshold is None:
        raise BandsError(f"{row.config}: {env_id} states no solved threshold the gate could count seeds by")
    return path, env_id, threshold


def run_gate(
    names: Sequence[str],
    out: Path,
    command: str,
    bands_path: Path = BANDS_FILE,
    write: bool = False,
    seeds: Sequence[int] | None = None,
    budget: int | None = None,
    configs: Path = CONFIGS,
) -> int:
    """Run the rows ``names`` (with ``seeds`` and ``budget`` instead of each row's own when given: for
    trying things out, the bands then do not apply), write ``gate.json`` and ``gate.md`` under ``out``,
    then compare with the bands (or, with ``write``, calibrate: run seeds 0..7 too and write the bands
    from them).  Returns the exit status: 0 inside the bands, 1 outside."""
    targets = {name: env_of(GATE_ROWS[name], configs) for name in names}  # every config there before any run
    meta = {"command": command, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    print(f"command: {command}\nmachine: {meta['machine']}\n", flush=True)
    result: dict[str, Any] = {"meta": meta, "eval_episodes": EVAL_EPISODES, "rows": {}}
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="msrl-gate-", dir=out) as runs_dir:
        for name in names:
            row = GATE_ROWS[name]
            run_seeds = seeds
            if write:  # the calibration: the row's own seeds among 0..n-1
                extra = range(CALIBRATION_SEEDS) if seeds is None else seeds
                run_seeds = tuple(sorted(set(extra) | set(row.seeds)))
            row = row if run_seeds is None else dataclasses.replace(row, seeds=tuple(run_seeds))
            row = row if budget is None else dataclasses.replace(row, budget=budget)
            path, env_id, threshold = targets[name]
            print(f"== {name}: budget {row.budget:,} env steps, seeds {list(row.seeds)}", flush=True)
            per_seed = []
            for seed in row.seeds:
                record, _ = train_and_record(path, seed, row.budget, EVAL_EPISODES, runs_dir, row.overrides)
                hit = record.reached(threshold)
                where = "not reached" if hit is None else f"reached at {hit.env_steps:,} steps"
                print(
                    f"  seed {seed}: {record.wall_seconds:6.1f} s  greedy {record.final_return:6.1f}  {where}",
                    flush=True,
                )
                per_seed.append(seed_metrics(record, threshold))
            result["rows"][name] = row_metrics(row, per_seed, threshold, env_id)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    if write:
        (out / "calibration.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        write_bands(derive_bands(result), meta, bands_path)
        result["rows"] = {name: own_seeds(name, m) for name, m in result["rows"].items()}
    (out / "gate.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    bands = load_json(bands_path, "bands file") if bands_path.exists() else None
    table = gate_table(result, bands)
    (out / "gate.md").write_text(table + f"\n\n`{command}` -- {meta['machine']}\n", encoding="utf-8")
    print(f"\n{table}\n\ngate run: {result['wall_s']:.0f} s; wrote {out}/gate.json and gate.md")
    if bands is None:
        print(f"no bands file at {bands_path}: nothing compared (write one: {REFRESH_COMMAND})")
        return 0
    selected = {"rows": {k: v for k, v in bands["rows"].items() if k in names}}
    return report(check_bands(result, selected), bands_path)


def write_bands(rows: dict[str, Any], meta: dict[str, Any], bands_path: Path) -> None:
    """Write ``rows`` into ``bands_path``, keeping the rows of the file there that ``rows`` lacks."""
    old = load_json(bands_path, "bands file")["rows"] if bands_path.exists() else {}
    kept = {name: band for name, band in old.items() if name in GATE_ROWS and name not in rows}
    document = bands_document({**kept, **rows}, meta)
    bands_path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote the bands for {', '.join(rows)} to {bands_path}")


def report(failures: list[str], bands_path: Path) -> int:
    """Print the comparison's outcome; the exit status (1 when anything is outside the bands)."""
    if not failures:
        print(f"learning gate: every row inside the bands of {bands_path}")
        return 0
    print(f"learning gate: FAILED against {bands_path}:")
    for line in failures:
        print(f"  {line}")
    return 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m msrl.app.gate", description="msrl's learning gate: CartPole rows held to stored bands"
    )
    parser.add_argument("--configs", help=f"comma-separated rows (default all: {','.join(GATE_ROWS)})")
    parser.add_argument("--seeds", type=int, help="seeds 0..N-1 instead of each row's own (the bands then fail)")
    parser.add_argument("--steps", type=int, help="env steps instead of each row's budget (the bands then fail)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--bands", type=Path, default=BANDS_FILE, help="the bands file (default: msrl's own)")
    parser.add_argument("--configs-dir", type=Path, default=CONFIGS, help="where the shipped configs are")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write-bands", action="store_true", help="calibrate on seeds 0-7 and write the bands")
    what.add_argument("--rederive", action="store_true", help="no runs: the bands again from their calibrations")
    what.add_argument("--check", type=Path, metavar="RESULT", help="no runs: compare a saved gate.json only")
    args = parser.parse_args(argv)
    names = [c.strip() for c in (args.configs or ",".join(GATE_ROWS)).split(",") if c.strip()]
    unknown = [c for c in names if c not in GATE_ROWS]
    if unknown or not names:
        parser.exit(
            2, f"msrl: error: unknown gate row {unknown[0] if unknown else ''!r}; rows: {', '.join(GATE_ROWS)}\n"
        )
    if (args.seeds is not None and args.seeds < 1) or (args.steps is not None and args.steps < 1):
        parser.exit(2, "msrl: error: --seeds and --steps must be >= 1\n")
    args.names = names
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.check:
            return report(check_bands(load_json(args.check, "result"), load_json(args.bands, "bands file")), args.bands)
        if args.rederive:
            bands = load_json(args.bands, "bands file")
            write_bands(rederive(bands), bands.get("measured_with", {}), args.bands)
            return 0
        command = shlex.join(["python", "-m", "msrl.app.gate", *(sys.argv[1:] if argv is None else argv)])
        seeds = None if args.seeds is None else tuple(range(args.seeds))
        return run_gate(
            args.names, args.out.resolve(), command, args.bands, args.write_bands, seeds, args.steps, args.configs_dir
        )
    except (BandsError, MsrlError) as exc:
        print(f"msrl: error: {exc}", file=sys.stderr)
        return 2
