"""Asking for a GPU learner on a machine without one: ``msrl train`` stops in the driver,
before Ray starts or anything is written, with one ``msrl: error:`` line and exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
COMMON = [
    "train",
    "configs/ppo_cartpole.yaml",
    "--set",
    "policy=single_learner_coarse",
    "--set",
    "policy.learner_gpus=1",
    "--set",
    "total_env_steps=4096",
]


@pytest.mark.parametrize(
    "extra, words",
    [
        ([], "msrl: error: fragment 'learner' asks for device 'cuda' but torch sees no CUDA GPU"),
        (
            ["--set", "policy.learner_executor=cpu"],
            "msrl: error: fragment 'learner': the cpu executor runs on device cpu, got 'cuda'",
        ),
    ],
    ids=["torch-learner", "cpu-executor"],
)
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where no GPU is seen")
def test_a_gpu_learner_without_a_gpu_is_one_line_exit_2(extra: list[str], words: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "msrl", *COMMON, "--set", f"runs_dir={tmp_path}", *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(words), proc.stderr  # before Ray's start: no Ray line either
    assert list(tmp_path.iterdir()) == []
