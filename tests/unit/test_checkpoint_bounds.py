"""Tiny inputs that expand: a checkpoint or config built of shared references, a cyclic
one, and the YAML alias bomb fail in well under 2 s and 200 MB with one line, instead of taking
minutes and gigabytes to copy or hash what they expand to."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
import torch

import msrl
from msrl import CheckpointError, ConfigError
from msrl.app import load_checkpoint, save_checkpoint

BOUND_S, BOUND_BYTES = 2.0, 200 * 2**20
FORMAT = "msrl-checkpoint/2"


def expanding(levels: int) -> list:
    """``levels`` nested lists of ten references to the one below: 10^levels leaves, a few hundred bytes pickled."""
    value: list = ["lol"] * 10
    for _ in range(levels - 1):
        value = [value] * 10
    return value


def bounded(action) -> Exception:
    """Run ``action``, which must raise; assert it did so within the time and memory bounds."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises((ConfigError, CheckpointError)) as caught:
            action()
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < BOUND_S, f"took {elapsed:.1f} s"
    assert peak < BOUND_BYTES, f"allocated {peak / 2**20:.0f} MB"
    assert "\n" not in str(caught.value)
    return caught.value


def crafted(path: Path, config: dict) -> Path:
    """A checkpoint file as a crafted one would be: the format right, any manifest."""
    torch.save(
        {
            "format": FORMAT,
            "config": config,
            "iteration": 1,
            "env_steps": 1,
            "components": {},
            "manifest": {"sha256": "0" * 64},
        },
        path,
    )
    return path


def test_a_checkpoint_of_shared_references_is_refused_before_it_is_walked(tmp_path: Path) -> None:
    path = crafted(tmp_path / "bomb.pt", {"name": "x", "algo": {"hidden_sizes": expanding(26)}})
    assert path.stat().st_size < 4096
    error = bounded(lambda: load_checkpoint(str(path)))
    assert "expands to over 2,000,000 values" in str(error)


def test_a_cyclic_checkpoint_is_refused(tmp_path: Path) -> None:
    cycle: list = []
    cycle.append(cycle)
    path = crafted(tmp_path / "cycle.pt", {"name": "x", "algo": {"hidden_sizes": cycle}})
    assert "nests over 64 levels" in str(bounded(lambda: load_checkpoint(str(path))))


def test_a_verified_checkpoint_whose_config_shares_a_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "shared.pt"
    save_checkpoint(
        str(path),
        {
            "config": {"name": "x", "algo": {"hidden_sizes": expanding(3)}},
            "iteration": 1,
            "env_steps": 1,
            "components": {},
        },
    )  # a valid manifest: 1,000 leaves hash quickly
    assert "shared reference" in str(bounded(lambda: load_checkpoint(str(path))))


def test_a_mapping_config_of_shared_references_is_refused_by_train(tmp_path: Path) -> None:
    config = {"runs_dir": str(tmp_path), "algo": {"hidden_sizes": expanding(26)}}
    assert "shared reference" in str(bounded(lambda: msrl.train(config)))
    assert list(tmp_path.iterdir()) == []


def test_the_yaml_alias_bomb_is_refused_at_its_first_alias(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert "YAML aliases are not allowed" in str(bounded(lambda: msrl.train(str(path), [f"runs_dir={tmp_path}/runs"])))
    assert not (tmp_path / "runs").exists()


class _RunsCode:
    def __reduce__(self):
        return (exec, ("open('/tmp/msrl-pickled-code-ran', 'w').close()",))


def test_a_checkpoint_with_pickled_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = Path("/tmp/msrl-pickled-code-ran")
    marker.unlink(missing_ok=True)
    path = tmp_path / "evil.pt"
    torch.save(
        {"format": FORMAT, "config": {"name": _RunsCode()}, "iteration": 1, "env_steps": 1, "components": {}}, path
    )
    error = bounded(lambda: load_checkpoint(str(path)))
    assert "corrupt or not an msrl checkpoint" in str(error) and "weights_only=False" not in str(error)
    assert not marker.exists()
