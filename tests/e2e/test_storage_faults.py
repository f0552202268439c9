"""A run directory that cannot take a write: a disk that fills while a checkpoint or a record is
written, and a read-only one. The run stops with one line naming the path and the bytes it needed,
its last checkpoint as it was (it verifies, and a copy resumes), or, with
``on_checkpoint_error: continue``, goes on without the checkpoint and says so each time.

The file systems are real: tmpfs mounts of a few hundred KB made for each test and unmounted after
it, which needs root; elsewhere the tests skip, saying so."""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import CONFIG, REPO, assert_one_error_line, in_process

import msrl
from msrl import StorageError
from msrl.app import Trainer, load_checkpoint, read_metrics

ITERATIONS = 4
COMMON = [
    "progress=false",
    "eval_episodes=0",
    "algo.num_envs=8",
    "algo.num_steps=32",
    "algo.compile=false",
    f"total_env_steps={ITERATIONS * 8 * 32}",
]
PAGE = 4096


def _sets(*overrides: str) -> list[str]:
    return [arg for override in (*COMMON, *overrides) for arg in ("--set", override)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``mount(size, read_only=False)``: a fresh tmpfs of ``size`` bytes under ``tmp_path``,
    unmounted after the test whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted: list[Path] = []

    def mount(size: int, read_only: bool = False) -> Path:
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "msrl-test", str(path)], capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(path)
        return path

    try:
        yield mount
    finally:
        for path in mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The size of this config's checkpoint, from a run on an ordinary directory."""
    runs = tmp_path_factory.mktemp("sized")
    run = msrl.train(str(REPO / CONFIG), [f"runs_dir={runs}", "checkpoint_every=1", *COMMON])
    return os.path.getsize(run.checkpoint)


def _room_for_one(checkpoint: int) -> int:
    """A disk that holds one checkpoint and the run's other files, but not a second checkpoint
    beside the first (the new one is written in full before it replaces the old)."""
    return (checkpoint + checkpoint // 2) // PAGE * PAGE + 16 * PAGE


def test_a_full_disk_at_a_checkpoint_stops_the_run_with_one_line_and_keeps_the_last(
    small_disk, checkpoint_bytes: int, tmp_path: Path
) -> None:
    disk = small_disk(_room_for_one(checkpoint_bytes))
    result = in_process("train", CONFIG, *_sets(f"runs_dir={disk}", "checkpoint_every=1"))
    path = disk / "ppo_cartpole" / "checkpoint.pt"
    assert_one_error_line(
        result, [f"cannot write checkpoint {path}", "No space left on device", "bytes", "(iteration 1) kept"]
    )
    needed = int(result.stderr.split("it needs ")[1].split(" bytes")[0].replace(",", ""))
    assert abs(needed - checkpoint_bytes) < checkpoint_bytes // 10  # the checkpoint's own size
    assert load_checkpoint(str(path))["iteration"] == 1  # verified, as it was
    assert not list(path.parent.glob(".ckpt-*"))  # the half-written one removed
    copy = tmp_path / "copy"
    shutil.copytree(path.parent, copy)
    resumed = msrl.train(None, [], resume=copy / "checkpoint.pt")
    assert resumed.iterations == ITERATIONS and [r["iteration"] for r in resumed.metrics] == [1, 2, 3, 4]


def test_on_checkpoint_error_continue_trains_on_and_says_so_each_time(small_disk, checkpoint_bytes: int) -> None:
    disk = small_disk(_room_for_one(checkpoint_bytes))
    lines = io.StringIO()
    overrides = [f"runs_dir={disk}", "checkpoint_every=1", "on_checkpoint_error=continue", *COMMON]
    run = msrl.train(str(REPO / CONFIG), overrides, stream=lines)
    assert run.iterations == ITERATIONS and run.checkpoint_iteration == 1
    path = disk / "ppo_cartpole" / "checkpoint.pt"
    notes = [line for line in lines.getvalue().splitlines() if "not written" in line]
    # iterations 2 to 4, and the checkpoint at the end
    assert len(notes) == ITERATIONS, lines.getvalue()
    assert all(f"cannot write checkpoint {path}" in n and "(iteration 1) kept" in n for n in notes)
    assert [r["iteration"] for r in read_metrics(path.parent)] == list(range(1, ITERATIONS + 1))
    assert load_checkpoint(str(path))["iteration"] == 1


def test_a_record_the_disk_cannot_take_stops_the_run_naming_the_file(small_disk) -> None:
    disk = small_disk(32 * PAGE)
    with pytest.raises(StorageError) as caught:
        with Trainer(str(REPO / CONFIG), [f"runs_dir={disk}", "checkpoint_every=0", *COMMON]) as trainer:
            trainer.step()
            filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)  # every byte left taken
            try:
                while True:
                    os.write(filler, b"\0" * PAGE)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
            finally:
                os.close(filler)
            for _ in range(20):
                trainer.step()
    message = str(caught.value)
    run_dir = disk / "ppo_cartpole"
    assert f"cannot write {run_dir / 'metrics.jsonl'}" in message or f"cannot write {run_dir}" in message
    assert "No space left on device" in message and "it has written no checkpoint yet" in message
    assert len(message.splitlines()) == 1
    assert read_metrics(run_dir)[0]["iteration"] == 1  # what was recorded stays readable


def test_a_read_only_runs_dir_is_one_line_and_nothing_is_written(small_disk) -> None:
    disk = small_disk(16 * PAGE, read_only=True)
    result = in_process("train", CONFIG, *_sets(f"runs_dir={disk}"))
    assert_one_error_line(result, [f"cannot write the run directory {disk / 'ppo_cartpole'}", "Read-only file system"])
    assert not list(disk.iterdir())
