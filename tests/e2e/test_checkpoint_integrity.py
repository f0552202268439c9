"""Checkpoints are verified against their manifest before anything in them is used: a byte flipped
in tensor data, or a config edited after saving, is one ``msrl: error`` line, exit 2, and the file
is left as it was."""

from __future__ import annotations

import contextlib
import io
import zipfile
from pathlib import Path

import pytest
import torch

import msrl
from msrl.app import main

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> bytes:
    run = msrl.train(
        CONFIG,
        [f"runs_dir={tmp_path_factory.mktemp('runs')}", "progress=false", "eval_episodes=0", "total_env_steps=4096"],
    )
    return Path(run.checkpoint).read_bytes()


def run_cli(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue()


def flip_a_tensor_byte(data: bytes) -> bytes:
    """Flip one byte in the middle of the largest tensor's stored data (torch's zip stores it raw)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entry = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    assert entry.compress_type == zipfile.ZIP_STORED
    raw = bytearray(data)
    start = entry.header_offset  # the local file header: 30 bytes, then its own name and extra field
    name_len = int.from_bytes(raw[start + 26 : start + 28], "little")
    extra_len = int.from_bytes(raw[start + 28 : start + 30], "little")
    raw[start + 30 + name_len + extra_len + entry.file_size // 2] ^= 0x5A
    return bytes(raw)


def test_a_flipped_tensor_byte_is_refused_and_the_file_kept(checkpoint: bytes, tmp_path: Path) -> None:
    damaged = tmp_path / "checkpoint.pt"
    damaged.write_bytes(flip_a_tensor_byte(checkpoint))
    assert torch.load(damaged, weights_only=True)["format"]  # torch itself loads it without complaint
    for args in (["eval", str(damaged)], ["train", "--resume", str(damaged)]):
        code, err = run_cli(args)
        assert code == 2 and err.startswith("msrl: error: ") and err.count("\n") == 1, err
        assert "does not match its manifest's SHA-256" in err
    assert damaged.read_bytes() == flip_a_tensor_byte(checkpoint)  # left as it was


def test_an_edited_config_is_refused_before_its_algorithm_is_imported(checkpoint: bytes, tmp_path: Path) -> None:
    payload = torch.load(io.BytesIO(checkpoint), weights_only=True)
    payload["config"]["algorithm"] = "antigravity:Fly"  # importing it would open a web browser
    edited = tmp_path / "edited.pt"
    torch.save(payload, edited)
    code, err = run_cli(["eval", str(edited)])
    assert code == 2 and "does not match its manifest's SHA-256" in err
    del payload["manifest"]
    torch.save(payload, edited)
    code, err = run_cli(["eval", str(edited)])
    assert code == 2 and "has no manifest; it cannot be verified" in err


def test_the_intact_checkpoint_evaluates(checkpoint: bytes, tmp_path: Path) -> None:
    intact = tmp_path / "checkpoint.pt"
    intact.write_bytes(checkpoint)
    code, err = run_cli(["eval", str(intact), "--episodes", "2"])
    assert code == 0, err


def test_an_update_that_leaves_weights_non_finite_stops_the_run_and_keeps_the_checkpoint(
    checkpoint: bytes, tmp_path: Path
) -> None:
    """A learning rate of 1e30 is finite, so the config takes it; the first update turns the weights
    to NaN. Before: every later loss logged as nan, exit 0, and the checkpoint overwritten with NaN."""
    good = tmp_path / "checkpoint.pt"
    good.write_bytes(checkpoint)
    code, err = run_cli(
        [
            "train",
            "--resume",
            str(good),
            "--set",
            "algo.learning_rate=1e30",
            "--set",
            "total_env_steps=8192",
            "--set",
            "checkpoint_every=1",
        ]
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "learner 'learner' has non-finite weights (NaN or inf) after its update" in err
    assert good.read_bytes() == checkpoint  # the last good checkpoint, untouched
