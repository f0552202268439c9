"""What the command-line tests share: ``msrl ARGS`` run through ``msrl.app.main`` in this process,
and the one shape every bad input must end in."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

from msrl.app import main

REPO = Path(__file__).resolve().parents[2]
CONFIG = "configs/ppo_cartpole.yaml"


def in_process(*args: str) -> subprocess.CompletedProcess:
    """``msrl ARGS`` through ``msrl.app.main`` here: its exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's errors
            code = exc.code
    return subprocess.CompletedProcess(["msrl", *args], code, out.getvalue(), err.getvalue())


def explain(result: subprocess.CompletedProcess) -> str:
    """Exit status and output tails, for an assertion message."""
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-2000:]}"


def assert_one_error_line(result: subprocess.CompletedProcess, words: list[str]) -> None:
    """Exit status 2, nothing on stdout, one line on stderr: ``msrl: error: ...`` holding every word."""
    assert result.returncode == 2, explain(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, explain(result)
    assert lines[0].startswith("msrl: error: "), explain(result)
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert result.stdout == ""
