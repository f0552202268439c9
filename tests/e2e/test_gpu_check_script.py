"""``tools/gpu/check.sh``, the one bounded run of the GPU checks, on a machine without a GPU: its
phases run in order or beside each other, each result is one line of ``summary.txt``, a phase past
the deadline is not started, and a preset asked of a GPU that is not there ends in msrl's one line.
(On a GPU machine the same script trains; these checks of its plumbing then skip.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "gpu" / "check.sh"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the script where no GPU is seen")


def _run(tmp_path: Path, *phases: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    out = tmp_path / "out"
    variables = {**os.environ, "OUT": str(out), "LOGS": str(tmp_path / "logs"), "PYTHON": sys.executable, **env}
    proc = subprocess.run(
        ["bash", str(SCRIPT), *phases], cwd=REPO, env=variables, capture_output=True, text=True, timeout=240
    )
    return proc, (out / "summary.txt").read_text().splitlines()


def test_presets_beside_tests_each_say_one_line_and_the_summary_ends_the_output(tmp_path: Path) -> None:
    proc, summary = _run(
        tmp_path,
        "presets+",
        "tests",
        "learning",
        PRESETS="gpu_only",
        TESTS="tests/unit/test_collective.py",
        TEST_WORKERS="1",  # the GPU machine's 12 workers, each importing torch, cost 20 s of 2 cores
        LEARN_WORKERS="0",  # in pytest's own process
        DEADLINE="200",
    )
    assert proc.returncode == 0, proc.stderr
    assert any(re.search(r"train gpu_only: exit 2 in \d+s$", line) for line in summary), summary
    no_gpu = "msrl: error: fragment 'device' asks for device 'cuda' but torch sees no CUDA GPU"
    assert any(line.startswith("[") and f"train gpu_only: {no_gpu}" in line for line in summary), summary
    assert not [line for line in summary if "train coarse-learner-gpu" in line]  # PRESETS picked one run
    assert any("tests:" in line and " passed" in line for line in summary), summary
    assert any(re.search(r"learning: 8 skipped in ", line) for line in summary), summary  # no GPU here
    assert summary[-1].endswith("done") and proc.stdout.rstrip().endswith("done")  # the summary is printed last
    assert (tmp_path / "out" / "train.log").is_file() and (tmp_path / "out" / "tests.log").is_file()


def test_a_phase_past_the_deadline_is_not_started(tmp_path: Path) -> None:
    proc, summary = _run(tmp_path, "ppo", DEADLINE="3")
    assert proc.returncode == 0, proc.stderr
    assert any("training_speed device mode: not run (the 3s deadline is near)" in line for line in summary), summary
    assert not (tmp_path / "out" / "bench.log").exists()  # nothing was started
