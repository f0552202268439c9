"""What a run on Ray prints: msrl's own lines, and Ray's log lines only from ERROR on unless
``--verbose`` asks for its informational ones too (its start, the notice that token authentication
is on).  Token authentication itself is left as Ray configures it: only its log line is hidden."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import CONFIG, REPO

RAY_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\t[A-Z]+ \S+:\d+ -- ")
"""A line in Ray's log format (``ray_constants.LOGGER_FORMAT``)."""


def train_on_ray(runs_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """A tiny run under single_learner_coarse, in a fresh process that starts its embedded Ray."""
    sets = ["policy=single_learner_coarse", "total_env_steps=2048", "eval_episodes=0", "progress=false"]
    return subprocess.run(
        [sys.executable, "-m", "msrl", "train", CONFIG, *[a for s in sets for a in ("--set", s)], *flags]
        + ["--set", f"runs_dir={runs_dir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_on_ray_prints_msrl_lines_and_no_informational_ray_log_lines(tmp_path: Path) -> None:
    result = train_on_ray(tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith("msrl: ") for line in lines), result.stderr


@pytest.mark.slow  # a second embedded Ray start: 30-40 s on two loaded cores
def test_verbose_shows_rays_informational_log_lines(tmp_path: Path) -> None:
    result = train_on_ray(tmp_path, "--verbose")
    assert result.returncode == 0, result.stderr
    assert any(RAY_LINE.match(line) for line in result.stderr.splitlines()), result.stderr
