"""``benchmarks.offline_learning`` makes each level's dataset once in its work folder and trains a
policy only for a dataset that is missing: with every dataset there, a run starts training at once
(HalfCheetah's expert policy is hours of a core to make again); with ``--runs`` an interrupted run
is continued from its checkpoint by the same command, and a finished one is never run again."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

import pytest
from data_helpers import played_pendulum_data

import benchmarks.offline_learning as offline
from benchmarks.harness import read_jsonl
from msrl.app import Trainer


def test_datasets_that_exist_are_used_without_training_a_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for level in offline.LEVELS:
        (tmp_path / "datasets" / f"halfcheetah-{level}").mkdir(parents=True)

    def trained(*args: object) -> str:
        raise AssertionError(f"a policy was trained: {args}")

    monkeypatch.setattr(offline, "policy_checkpoint", trained)
    made = offline.datasets(tmp_path, "halfcheetah", episodes=10, medium_steps=100)
    assert made == {level: tmp_path / "datasets" / f"halfcheetah-{level}" for level in offline.LEVELS}


def test_a_missing_dataset_trains_only_its_own_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for level in ("random", "expert", "medium-expert"):
        (tmp_path / "datasets" / f"halfcheetah-{level}").mkdir(parents=True)
    asked: list[tuple[str, int | None]] = []

    def trained(workdir: Path, source: str, name: str, steps: int | None) -> str:
        asked.append((name, steps))
        return str(workdir / "runs" / name / "checkpoint.pt")

    recorded: list[tuple[str, Path]] = []
    monkeypatch.setattr(offline, "policy_checkpoint", trained)
    monkeypatch.setattr("msrl.app.record", lambda checkpoint, episodes, out, **kw: recorded.append((checkpoint, out)))
    offline.datasets(tmp_path, "halfcheetah", episodes=10, medium_steps=100)
    assert asked == [("halfcheetah-medium", 100)]
    assert recorded == [
        (str(tmp_path / "runs" / "halfcheetah-medium" / "checkpoint.pt"), tmp_path / "datasets" / "halfcheetah-medium")
    ]


def _arguments(tmp_path: Path, runs: str | None) -> argparse.Namespace:
    """A tiny benchmark run: IQL, 40 gradient steps (4 iterations) on random Pendulum data."""
    return argparse.Namespace(
        corl=None,
        corl_path=[],
        env="pendulum",
        workdir=str(tmp_path),
        seeds=[1],
        algorithms=["iql"],
        levels=["random"],
        policies=["local"],
        gradient_steps=40,
        episodes=None,
        medium_steps=None,
        eval_episodes=2,
        set=["algo.compile=false"],
        out=str(tmp_path / "out.jsonl"),
        runs=runs,
        checkpoint_every=1,
    )


@pytest.fixture(scope="module")
def random_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return played_pendulum_data(tmp_path_factory.mktemp("data"), episodes=10)


def test_a_kept_run_stopped_part_way_is_continued_by_the_same_command(
    random_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``--runs``, a run stopped part way (a preemption's notice) ends the benchmark with its
    checkpoint named; the same command continues it from there to the greedy return of a run never
    stopped, and a run ``--out`` already holds is not run again."""
    monkeypatch.setattr(offline, "datasets", lambda *args: {level: random_data for level in offline.LEVELS})
    straight = _arguments(tmp_path / "straight", None)
    Path(straight.workdir).mkdir()
    offline.run(straight)
    [expected] = read_jsonl([straight.out])

    args = _arguments(tmp_path, str(tmp_path / "runs"))
    step = Trainer.step

    def stopped_after_two(trainer: Trainer) -> dict:
        record = step(trainer)
        if trainer.iteration == 2:
            signal.raise_signal(signal.SIGTERM)
        return record

    monkeypatch.setattr(Trainer, "step", stopped_after_two)
    with pytest.raises(SystemExit, match=r"stopped by SIGTERM at iteration 2 .*checkpoint .*checkpoint\.pt"):
        offline.run(args)
    assert not Path(args.out).exists()  # nothing recorded for a run that has not finished
    monkeypatch.setattr(Trainer, "step", step)
    offline.run(args)
    [record] = read_jsonl([args.out])
    assert record["greedy_return"] == pytest.approx(expected["greedy_return"], rel=1e-6)
    assert record["wall_s"] is None and record["train_s"] > 0  # this process ran only the last two
    assert Path(record["run_dir"], "eval.json").exists()

    def trained(*args: object, **kwargs: object) -> None:
        raise AssertionError("a recorded run was trained again")

    monkeypatch.setattr("msrl.train", trained)
    offline.run(args)
    assert read_jsonl([args.out]) == [record]
    Path(args.out).unlink()  # the run's folder says it finished: read back, not trained again
    offline.run(args)
    [again] = read_jsonl([args.out])
    assert again["greedy_return"] == record["greedy_return"] and again["run_dir"] == record["run_dir"]
