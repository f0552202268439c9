"""What the multi-host tests share: the quick-start config and the ``msrl train`` command that joins a
testbed's head."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")


def train_command(head: str, runs_dir: Path, *overrides: str) -> list[str]:
    """``msrl train`` of the quick-start config, joining the testbed's head."""
    sets = [f"runs_dir={runs_dir}", "eval_episodes=2", "progress=false", *overrides]
    return [sys.executable, "-m", "msrl", "train", CONFIG, "--address", head, *(a for s in sets for a in ("--set", s))]


def output(done: subprocess.CompletedProcess) -> str:
    return f"{done.stdout}\n{done.stderr}"
