"""The learning gate: ``python -m msrl.app.gate`` trains the CartPole rows at reduced budgets with
fixed seeds and compares what they reach with the stored bands (msrl/app/gate/bands.json).  The
default suite checks the comparison through the gate's own entry (``--check`` on a result made from
the bands' measured values, and on ones made worse); the gate run itself (3 to 5 minutes on the
2-core VM) is in CI's landing tier (``-m landing``), after the default suite."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from msrl.app import gate

REPO = Path(__file__).resolve().parents[2]


def _bands() -> dict[str, Any]:
    return gate.load_json(gate.BANDS_FILE, "bands file")


def _result_at_measured() -> dict[str, Any]:
    """A gate result whose every row holds the values measured when the bands were written."""
    rows = {}
    for name, band in _bands()["rows"].items():
        entries = {**band.get("unbanded", {}), **{m: band[m] for m in gate.METRICS if m in band}}
        rows[name] = {"budget": band["budget"], "seeds": band["seeds"]}
        rows[name].update({metric: entries[metric]["measured"] for metric in gate.METRICS})
    return {"rows": rows}


def _check(result: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    code = gate.main(["--check", str(path)])
    return code, capsys.readouterr().out


def test_the_bands_cover_every_row_at_its_budget_and_seeds() -> None:
    bands = _bands()
    assert set(bands["rows"]) == set(gate.GATE_ROWS) and "--write-bands" in bands["about"]
    for name, band in bands["rows"].items():
        row = gate.GATE_ROWS[name]
        assert band["budget"] == row.budget and band["seeds"] == list(row.seeds), name
        assert band["final_return_mean"]["min"] < band["final_return_mean"]["measured"] <= 500, name
        assert band["training_return_mean"]["min"] < band["training_return_mean"]["measured"], name
        if "reached" in band:
            assert band["reached"]["min"] <= band["reached"]["measured"] <= len(band["seeds"]), name
        if "steps_to_threshold_mean" in band:
            steps = band["steps_to_threshold_mean"]
            assert steps["measured"] <= steps["max"], name


def test_the_measured_values_pass(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, out = _check(_result_at_measured(), tmp_path, capsys)
    assert code == 0, out
    assert "every row inside the bands" in out


def test_a_worse_result_fails_naming_the_row_and_the_value(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bands = _bands()["rows"]
    worse_return, worse_curve = sorted(bands)[0], sorted(bands)[-1]
    result = _result_at_measured()
    low = bands[worse_return]["final_return_mean"]["min"] - 0.5
    result["rows"][worse_return]["final_return_mean"] = low
    flat = bands[worse_curve]["training_return_mean"]["min"] - 0.5
    result["rows"][worse_curve]["training_return_mean"] = flat
    code, out = _check(result, tmp_path, capsys)
    assert code == 1, out
    failures = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert f"{worse_return}: final_return_mean (mean final greedy return) = {low:g}, below the band's min" in out
    assert f"{worse_curve}: training_return_mean (mean training return over the run) = {flat:g}, below" in out
    assert len(failures) == (1 if worse_return == worse_curve else 2), out  # nothing else is reported


@pytest.mark.parametrize("name", sorted(gate.GATE_ROWS))
def test_a_row_that_learns_nothing_fails_every_band_it_has(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A row at a random policy's level (CartPole's: returns about 22, no seed reaching 475, every
    seed's steps counted as the budget) is outside each of its bands, however noisy the row."""
    band = _bands()["rows"][name]
    chance = gate.RANDOM_RETURN[band["env_id"]]
    result = _result_at_measured()
    result["rows"][name].update(
        final_return_mean=chance,
        training_return_mean=chance,
        reached=0,
        steps_to_threshold_mean=float(band["budget"]),
    )
    code, out = _check(result, tmp_path, capsys)
    failed = {line.split(" (")[0].split(": ")[1] for line in out.splitlines() if line.startswith(f"  {name}: ")}
    assert code == 1 and failed == {m for m in gate.METRICS if m in band}, out


def test_a_row_missing_or_run_at_another_budget_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    result = _result_at_measured()
    gone, other = sorted(result["rows"])[0], sorted(result["rows"])[-1]
    changed = copy.deepcopy(result)
    del changed["rows"][gone]
    code, out = _check(changed, tmp_path, capsys)
    assert code == 1 and f"{gone}: missing from the result" in out, out
    changed = copy.deepcopy(result)
    changed["rows"][other]["budget"] += 1
    code, out = _check(changed, tmp_path, capsys)
    assert code == 1 and f"{other}: ran with budget" in out and "--write-bands" in out, out


def test_an_unreadable_result_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "gate.json"
    path.write_text("{not json", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "msrl.app.gate", "--check", str(path)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msrl: error: cannot read result"), done.stderr


@pytest.mark.slow
@pytest.mark.landing  # 169-294 s on the 2-core VM with other work beside it
@pytest.mark.timeout(1200)
def test_the_gate_passes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = gate.main(["--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads((tmp_path / "gate.json").read_text(encoding="utf-8"))
    assert set(result["rows"]) == set(_bands()["rows"])
