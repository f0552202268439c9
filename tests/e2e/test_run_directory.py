"""Run directories under concurrent and interrupted use: one process at a time holds a
run directory, a resume rewrites config.yaml with the config it goes on with, and a metrics line an
interrupted write left half-written does not stop a resume."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import explain, in_process

import msrl
from msrl import ConfigError
from msrl.app import Trainer, read_metrics

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml")
COMMON = ["progress=false", "eval_episodes=0", "total_env_steps=4096", "checkpoint_every=1", "algo.anneal_lr=false"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    return Path(msrl.train(CONFIG, [f"runs_dir={tmp_path_factory.mktemp('runs')}", *COMMON]).run_dir)


def test_a_run_directory_in_use_cannot_be_resumed_by_another_process(finished: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    before = (copy / "metrics.jsonl").read_bytes()
    with Trainer(None, ["total_env_steps=8192"], resume=copy / "checkpoint.pt"):
        with pytest.raises(ConfigError, match=r"is in use by another msrl process \(pid \d+\)"):
            Trainer(None, ["total_env_steps=8192"], resume=copy / "checkpoint.pt")
        assert (copy / "metrics.jsonl").read_bytes() == before  # the refused resume touched nothing
    with Trainer(None, ["total_env_steps=8192"], resume=copy / "checkpoint.pt") as again:  # released on close
        again.step()
    assert [r["iteration"] for r in read_metrics(copy)] == [1, 2, 3]


def test_a_resume_rewrites_config_yaml_with_its_config(finished: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    msrl.train(None, ["total_env_steps=6144"], resume=copy / "checkpoint.pt")
    assert yaml.safe_load((copy / "config.yaml").read_text())["total_env_steps"] == 6144


def test_a_half_written_last_metrics_line_is_dropped_on_resume(finished: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    with open(copy / "metrics.jsonl", "a", encoding="utf-8") as metrics:
        metrics.write('{"iteration": 3, "env_steps": 61')  # the driver was killed mid-write
    assert [r["iteration"] for r in read_metrics(copy)] == [1, 2]  # readers skip it too
    run = msrl.train(None, ["total_env_steps=8192"], resume=copy / "checkpoint.pt")
    assert [r["iteration"] for r in run.metrics] == [1, 2, 3, 4]


def test_a_run_on_another_environment_gets_a_directory_named_after_it(tmp_path: Path) -> None:
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", "algo.env_id=Acrobot-v1", *COMMON]) as trainer:
        assert Path(trainer.run_dir) == tmp_path / "ppo_cartpole_Acrobot-v1"
    assert yaml.safe_load((tmp_path / "ppo_cartpole_Acrobot-v1" / "config.yaml").read_text())["algo"]["env_id"] == (
        "Acrobot-v1"
    )


def test_a_resumed_run_counts_its_seconds_over_the_whole_run_like_its_steps(finished: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    saved = torch.load(copy / "checkpoint.pt", weights_only=True)
    iterations = read_metrics(copy)
    assert saved["wall_time"] >= sum(r["wall_time"] for r in iterations) > 0  # each iteration, its record too
    with Trainer(None, ["total_env_steps=8192"], resume=copy / "checkpoint.pt") as trainer:
        assert trainer.wall_time == saved["wall_time"]  # goes on from the first session's, as the steps do

    result = in_process("train", "--resume", str(copy / "checkpoint.pt"), "--set", "total_env_steps=8192")
    assert result.returncode == 0, explain(result)
    line = result.stdout.splitlines()[0]
    found = re.fullmatch(
        rf"trained 4 iterations, 8,192 env steps in ([0-9.]+) s \(the whole run; resumed at iteration 2\); "
        rf"results in {re.escape(str(copy))}",
        line,
    )
    assert found, line
    assert float(found.group(1)) >= round(saved["wall_time"], 1)
