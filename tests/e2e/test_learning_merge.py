"""``python -m benchmarks.learning_quality --merge DIR ...``: runs made in separate processes (msrl
and SB3 side by side, or seeds added later) become one table, CSV set and plot, read back from each
run's ``curves.json`` (the format the benchmark writes); a merge that would count a seed twice or mix
budgets is one line and exit code 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from benchmarks.learning_quality import main


def _run(framework: str, seed: int, final: float, episodes: list[list[float]]) -> dict:
    return {
        "config": "ppo_cartpole",
        "framework": framework,
        "seed": seed,
        "env_steps": 150_000,
        "wall_seconds": 10.0 + seed,
        "eval_returns": [final, final],
        "episodes": episodes,
        "episodes_columns": ["env_steps", "wall_seconds", "mean_return", "count"],
    }


def _write(directory: Path, runs: list[dict], budget: int = 150_000) -> Path:
    directory.mkdir()
    meta = {"command": f"python -m benchmarks.learning_quality --out {directory.name}", "configs": {"ppo_cartpole": {}}}
    meta["configs"]["ppo_cartpole"]["budget"] = budget
    (directory / "curves.json").write_text(json.dumps({"meta": meta, "runs": runs}), encoding="utf-8")
    return directory


RISING = [[10_000 * k, float(k), 50.0 * k, 1] for k in range(1, 11)]
"""Ten episodes, one per 10k steps, returning 50, 100, ... 500: the rolling mean of 10 first
reaches 475 never (it is 275 at the end), so no run below reaches the threshold."""
SOLVED = [[10_000 * k, float(k), 500.0, 10] for k in range(1, 11)]
"""Every batch of 10 episodes at 500: 475 is reached at the first batch (10,000 steps, 1 s)."""


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_runs_from_separate_processes_become_one_table(tmp_path: Path, capsys) -> None:
    first = _write(tmp_path / "msrl", [_run("msrl", 0, 500.0, SOLVED), _run("msrl", 1, 300.0, RISING)])
    second = _write(tmp_path / "sb3", [_run("sb3", 0, 400.0, RISING)])
    out = tmp_path / "merged"
    assert main(["--merge", str(first), str(second), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "merged from 2 runs" in printed and "--out msrl" in printed and "--out sb3" in printed
    summary = {row["framework"]: row for row in _rows(out / "summary.csv")}
    assert set(summary) == {"msrl", "sb3"}
    assert float(summary["msrl"]["final_return_mean"]) == pytest.approx(400.0)  # seeds 0 and 1: 500, 300
    assert summary["msrl"]["reached"] == "1" and float(summary["msrl"]["steps_to_threshold_mean"]) == 10_000
    assert float(summary["sb3"]["final_return_mean"]) == 400.0 and summary["sb3"]["reached"] == "0"
    order = [(r["framework"], r["seed"]) for r in _rows(out / "runs.csv")]
    assert order == [("msrl", "0"), ("sb3", "0"), ("msrl", "1")]  # interleaved, as one run lists them
    assert (out / "ppo_cartpole.png").stat().st_size > 0
    # the merged directory merges again: a third seed added later
    third = _write(tmp_path / "later", [_run("msrl", 2, 200.0, RISING)])
    assert main(["--merge", str(out), str(third), "--out", str(tmp_path / "again")]) == 0
    again = {row["framework"]: row for row in _rows(tmp_path / "again" / "summary.csv")}
    assert again["msrl"]["seeds"] == "3" and float(again["msrl"]["final_return_mean"]) == pytest.approx(1000 / 3)


@pytest.mark.parametrize("problem", ["seed twice", "budgets differ", "not a run directory", "not json"])
def test_a_merge_that_cannot_be_made_is_one_line(problem: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    first = _write(tmp_path / "a", [_run("msrl", 0, 500.0, SOLVED)])
    if problem == "seed twice":
        second, expected = _write(tmp_path / "b", [_run("msrl", 0, 400.0, RISING)]), "msrl seed 0 is in both"
    elif problem == "budgets differ":
        second, expected = _write(tmp_path / "b", [_run("sb3", 0, 1.0, RISING)], budget=100_000), "merge runs of one"
    elif problem == "not a run directory":
        second, expected = tmp_path / "missing", "has no curves.json"
    else:
        second, expected = tmp_path / "b", "is not a learning_quality result"
        second.mkdir()
        (second / "curves.json").write_text("{", encoding="utf-8")
    out = tmp_path / "merged"
    assert main(["--merge", str(first), str(second), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("learning_quality: error: ") and expected in err[0], err
    assert not (out / "summary.md").exists()  # nothing half-written
