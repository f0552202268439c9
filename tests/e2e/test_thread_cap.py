"""A fragment asking for more CPUs than the machine has trains on the cores there are, on every
executor that runs here: ``cpus: 1000000`` reaches ``torch.set_num_threads`` capped at the
machine's cores, since a million threads crash the process (exit 139) rather than raise.

A subprocess, so that a crash is a failing exit status and not a dead test worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = "configs/ppo_cartpole.yaml"


@pytest.mark.parametrize("executor", ["torch", "cpu"])
def test_a_local_policy_asking_for_a_million_cpus_trains_on_every_executor(tmp_path: Path, executor: str) -> None:
    overrides = [
        f"runs_dir={tmp_path}",
        "name=capped",
        f"policy.executor={executor}",
        "policy.cpus=1000000",
        "total_env_steps=2048",
        "eval_episodes=1",
        "progress=false",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "msrl", "train", CONFIG, *[arg for o in overrides for arg in ("--set", o)]],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "capped" / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["env_steps"] == 2048
