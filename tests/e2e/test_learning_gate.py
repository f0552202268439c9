"""The learning regression gate: ``python benchmarks/learning.py --quick`` trains the CartPole rows
at reduced budgets with fixed seeds and compares what they reach with the stored bands
(benchmarks/learning_bands.json).  The default suite checks the comparison through the script's own
entry (``--check`` on a result made from the bands' measured values, and on one made worse); the
quick run itself, a few minutes on 2 cores, is under ``-m slow``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType  # the script fixture (tests/e2e/conftest.py)
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
BANDS = BENCHMARKS / "learning_bands.json"


def _bands() -> dict[str, Any]:
    return json.loads(BANDS.read_text(encoding="utf-8"))


def _result_at_measured() -> dict[str, Any]:
    """A quick result whose every row holds the values measured when the bands were written."""
    rows = {
        name: {
            "budget": band["budget"],
            "seeds": band["seeds"],
            **{metric: v["measured"] for metric, v in band.items() if isinstance(v, dict) and "measured" in v},
        }
        for name, band in _bands()["rows"].items()
    }
    return {"rows": rows}


def _check(
    script: ModuleType, result: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture
) -> tuple[int, str]:
    path = tmp_path / "quick.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    code = script.main(["--check", str(path)])
    return code, capsys.readouterr().out


def test_the_bands_cover_every_quick_row_at_its_budget_and_seeds(script: ModuleType) -> None:
    bands, rows = _bands(), script.QUICK_ROWS
    assert set(bands["rows"]) == set(rows) and "--write-bands" in bands["about"]
    for name, band in bands["rows"].items():
        assert band["budget"] == rows[name].budget and band["seeds"] == list(rows[name].seeds), name
        assert band["final_return_mean"]["min"] < band["final_return_mean"]["measured"] <= 500, name
        assert 0 <= band["reached"]["min"] <= band["reached"]["measured"] <= len(band["seeds"]), name
        steps = band["steps_to_threshold_mean"]
        assert steps["measured"] <= steps["max"] <= band["budget"], name


def test_the_measured_values_pass(script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, out = _check(script, _result_at_measured(), tmp_path, capsys)
    assert code == 0, out
    assert "every row inside the bands" in out


def test_a_worse_result_fails_naming_the_row_and_the_value(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bands = _bands()["rows"]
    worse_return, worse_curve = sorted(bands)[0], sorted(bands)[-1]
    result = _result_at_measured()
    low = bands[worse_return]["final_return_mean"]["min"] - 0.5
    result["rows"][worse_return]["final_return_mean"] = low
    flat = bands[worse_curve]["training_return_mean"]["min"] - 0.5
    result["rows"][worse_curve]["training_return_mean"] = flat
    code, out = _check(script, result, tmp_path, capsys)
    assert code == 1, out
    failures = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert f"{worse_return}: final_return_mean (mean final greedy return) = {low:g}, below the band's min" in out
    assert f"{worse_curve}: training_return_mean (mean training return over the run) = {flat:g}, below" in out
    assert len(failures) == (1 if worse_return == worse_curve else 2), out  # nothing else is reported


def test_a_row_missing_or_run_at_another_budget_fails(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    result = _result_at_measured()
    gone, other = sorted(result["rows"])[0], sorted(result["rows"])[-1]
    changed = copy.deepcopy(result)
    del changed["rows"][gone]
    code, out = _check(script, changed, tmp_path, capsys)
    assert code == 1 and f"{gone}: missing from the result" in out, out
    changed = copy.deepcopy(result)
    changed["rows"][other]["budget"] += 1
    code, out = _check(script, changed, tmp_path, capsys)
    assert code == 1 and f"{other}: ran with budget" in out and "--write-bands" in out, out


def test_an_unreadable_result_is_one_error(script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "quick.json"
    path.write_text("{not json", encoding="utf-8")
    assert script.main(["--check", str(path)]) == 2
    assert "learning.py: error: cannot read result" in capsys.readouterr().err


@pytest.mark.slow  # the quick rows: about 2 CPU minutes; past 10 minutes on a loaded 2-core VM
@pytest.mark.timeout(1800)
def test_the_quick_gate_passes(script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = script.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads((tmp_path / "quick.json").read_text(encoding="utf-8"))
    assert set(result["rows"]) == set(_bands()["rows"])
