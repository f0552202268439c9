"""``RunDirectory`` on its own: naming, the lock, config.yaml, metrics.jsonl and the event
file kept together, the rewind a resume and a recovery share, and the checkpoint with its manifest.
No training: records are written by hand, as ``Trainer`` writes them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from msrl import CheckpointError, ConfigError
from msrl.app import Position, RunDirectory, read_metrics


def record(iteration: int, per_iteration: int = 100) -> dict[str, float | int]:
    return {"iteration": iteration, "env_steps": iteration * per_iteration, "episode_return": 10.0 * iteration}


def logged_iterations(path: str) -> list[tuple[int, float]]:
    events = EventAccumulator(path, size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars("iteration")]


def test_a_new_run_never_reuses_a_name(tmp_path: Path) -> None:
    with RunDirectory.create(str(tmp_path), "ppo") as first, RunDirectory.create(str(tmp_path), "ppo") as second:
        assert (Path(first.path).name, Path(second.path).name) == ("ppo", "ppo_2")
        first.start({"name": "ppo", "seed": 3})
        assert yaml.safe_load((Path(first.path) / "config.yaml").read_text()) == {"name": "ppo", "seed": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ppo", "ppo_2"]


def test_the_lock_names_its_holder_and_is_released_on_close(tmp_path: Path) -> None:
    held = RunDirectory.create(str(tmp_path), "run")
    with pytest.raises(ConfigError, match=rf"is in use by another msrl process \(pid {os.getpid()}\)"):
        RunDirectory.reopen(held.path)
    held.close()
    held.close()  # a second close is harmless
    with RunDirectory.reopen(held.path) as again:
        assert again.path == os.path.abspath(held.path)


def test_records_go_to_metrics_and_tensorboard_and_not_after_close(tmp_path: Path) -> None:
    run_dir = RunDirectory.create(str(tmp_path), "run")
    run_dir.start({})
    for iteration in (1, 2):
        run_dir.record(record(iteration))
    assert run_dir.metrics() == [record(1), record(2)]
    assert logged_iterations(run_dir.path) == [(100, 1.0), (200, 2.0)]
    run_dir.close()
    with pytest.raises(RuntimeError, match="before start"):
        run_dir.record(record(3))


def test_a_rewind_drops_later_records_a_half_written_line_and_their_events(tmp_path: Path) -> None:
    run_dir = RunDirectory.create(str(tmp_path), "run")
    run_dir.start({})
    for iteration in (1, 2, 3):
        run_dir.record(record(iteration))
    with open(Path(run_dir.path) / "metrics.jsonl", "a", encoding="utf-8") as metrics:
        metrics.write('{"iteration": 4, "env_st')  # a write cut short
    run_dir.rewind(Position(iteration=1, env_steps=100))  # back to a checkpoint at iteration 1
    assert run_dir.metrics() == [record(1)]
    run_dir.record({**record(2), "episode_return": -1.0})  # the run goes on from there, differently
    run_dir.close()
    assert [r["episode_return"] for r in read_metrics(run_dir.path)] == [10.0, -1.0]
    lines = (Path(run_dir.path) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
    assert logged_iterations(run_dir.path) == [(100, 1.0), (200, 2.0)]  # TensorBoard hides the old 2 and 3


def test_a_resume_rewinds_as_a_recovery_does(tmp_path: Path) -> None:
    with RunDirectory.create(str(tmp_path), "run") as run_dir:
        run_dir.start({"total_env_steps": 300})
        for iteration in (1, 2, 3):
            run_dir.record(record(iteration))
    with RunDirectory.reopen(run_dir.path) as resumed:
        assert resumed.metrics() == [record(1), record(2), record(3)]  # reopening changes nothing yet
        resumed.start({"total_env_steps": 400}, resumed_at=Position(2, 200))
        assert resumed.metrics() == [record(1), record(2)]
        resumed.record(record(3))
    assert yaml.safe_load((Path(run_dir.path) / "config.yaml").read_text()) == {"total_env_steps": 400}
    assert logged_iterations(run_dir.path) == [(100, 1.0), (200, 2.0), (300, 3.0)]


def test_checkpoints_are_verified(tmp_path: Path) -> None:
    with RunDirectory.create(str(tmp_path), "run") as run_dir:
        assert run_dir.load_checkpoint() is None  # none written yet: a recovery starts over
        state = {"learner": {"w": torch.arange(4.0)}}
        run_dir.save_checkpoint({"config": {}, "iteration": 2, "env_steps": 200, "components": state})
        loaded = run_dir.load_checkpoint()
        assert loaded is not None and (loaded["iteration"], loaded["env_steps"]) == (2, 200)
        assert torch.equal(loaded["components"]["learner"]["w"], torch.arange(4.0))
        path = Path(run_dir.checkpoint_path)
        damaged = bytearray(path.read_bytes())
        at = damaged.find(torch.arange(4.0).numpy().tobytes())  # the tensor's bytes, stored as is
        damaged[at + 5] ^= 0xFF
        path.write_bytes(bytes(damaged))
        with pytest.raises(CheckpointError, match="does not match its manifest"):
            run_dir.load_checkpoint()
