"""``benchmarks.offline_learning`` makes each level's dataset once in its work folder and trains a
policy only for a dataset that is missing: with every dataset there, a run starts training at once
(HalfCheetah's expert policy is hours of a core to make again)."""

from __future__ import annotations

from pathlib import Path

import pytest

import benchmarks.offline_learning as offline


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
