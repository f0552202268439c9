"""Every run directory has TensorBoard event files that TensorBoard's own reader loads with the same
values as ``metrics.jsonl``, a resumed run included (no step twice, nothing from after the checkpoint)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import msrl
from msrl.app import Trainer, read_metrics

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")
COMMON = ["progress=false", "eval_episodes=0", "total_env_steps=8192", "algo.anneal_lr=false"]


def scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def expected(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as (env_steps, value) per numeric key, values rounded to float32 as events hold them."""
    table: dict[str, list[tuple[int, float]]] = {}
    for record in read_metrics(run_dir):
        for key, value in record.items():
            if key != "env_steps" and isinstance(value, (int, float)) and np.isfinite(value):
                table.setdefault(key, []).append((record["env_steps"], float(np.float32(value))))
    return table


def test_tensorboard_comes_with_the_base_install() -> None:
    """``tensorboard --logdir runs/`` works after ``pip install msrl``, not only with the dev extra."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "tensorboard" in {Requirement(r).name for r in project["dependencies"]}


def test_event_files_hold_the_metrics(tmp_path: Path) -> None:
    run = msrl.train(CONFIG, [f"runs_dir={tmp_path}", *COMMON])
    logged, wanted = scalars(run.run_dir), expected(run.run_dir)
    assert {"episode_return", "policy_loss", "steps_per_s", "time_learn", "iteration"} <= set(wanted)
    assert logged == wanted
    assert len(logged["iteration"]) == len(run.metrics) == 4


def test_a_resumed_run_shows_each_step_once(tmp_path: Path) -> None:
    """The interrupted run logged iterations 3-4 past its checkpoint at 2; the resumed one logs them
    again, and TensorBoard shows only the resumed run's values."""
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", *COMMON, "checkpoint_every=2"]) as trainer:
        while not trainer.done:
            trainer.step()
            if trainer.iteration == 2:
                shutil.copytree(trainer.run_dir, tmp_path / "copy")
    copy = tmp_path / "copy"
    for _ in range(2):  # the interrupted run goes on past the checkpoint, with other values
        with Trainer(None, [], resume=copy / "checkpoint.pt") as other:
            other.step()
    before = scalars(str(copy))
    assert before["iteration"] == [(2048, 1.0), (4096, 2.0), (6144, 3.0)]  # steps 1-2, then the last resume's 3
    resumed = msrl.train(None, [], resume=copy / "checkpoint.pt")
    logged = scalars(resumed.run_dir)
    assert logged == expected(resumed.run_dir)
    assert [step for step, _ in logged["iteration"]] == [2048, 4096, 6144, 8192]
