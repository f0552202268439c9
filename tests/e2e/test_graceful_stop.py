"""A run asked to stop (``SIGTERM`` from a preemption's notice or ``ray job stop``, ``SIGINT``
from Ctrl-C) finishes its iteration, checkpoints, names the checkpoint and the command that
continues it, and that continuation ends as the run would have without the stop. A second signal
stops at once, the last checkpoint as it was.

The signals are real: raised in this process while ``Trainer.run`` holds the handlers (between two
iterations, where a signal from outside would land as often as anywhere), and sent to a separate
``msrl train`` process for the command's own line and exit status."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import msrl
from msrl.app import Interrupted, Trainer, load_checkpoint, read_metrics

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")
ITERATIONS = 6
COMMON = [
    "progress=false",
    "eval_episodes=0",
    "algo.num_envs=8",
    "algo.num_steps=32",
    "algo.compile=false",
    "algo.anneal_lr=false",  # the schedule follows total_env_steps, which the two sessions share anyway
    f"total_env_steps={ITERATIONS * 8 * 32}",
]
LEARNING = ("iteration", "env_steps", "policy_loss", "value_loss", "entropy", "episode_return")


def _learning(records: list[dict]) -> list[list]:
    return [[record.get(key) for key in LEARNING] for record in records]


def _signal_after(trainer: Trainer, iteration: int, *signums: signal.Signals) -> None:
    """Make ``trainer`` raise ``signums`` in this process once it has finished ``iteration``."""
    step = trainer.step

    def step_then_signal() -> dict:
        record = step()
        if trainer.iteration == iteration:
            for signum in signums:
                signal.raise_signal(signum)
        return record

    trainer.step = step_then_signal  # type: ignore[method-assign]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_checkpoints_and_its_continuation_ends_as_the_run_would(
    signum: signal.Signals, tmp_path: Path
) -> None:
    straight = msrl.train(CONFIG, [f"runs_dir={tmp_path / 'straight'}", *COMMON]).metrics
    before = signal.getsignal(signum)
    with Trainer(CONFIG, [f"runs_dir={tmp_path / 'stopped'}", "checkpoint_every=0", *COMMON]) as trainer:
        _signal_after(trainer, 2, signum)
        trainer.run()
        assert trainer.stop_requested == signum.name and trainer.iteration == 2
        checkpoint = trainer.directory.checkpoint_path
    assert signal.getsignal(signum) == before  # the run's handlers were its own, for its loop only
    saved = load_checkpoint(checkpoint)  # verified against its manifest
    assert saved["iteration"] == 2 and saved["env_steps"] == 2 * 8 * 32
    assert [r["iteration"] for r in read_metrics(Path(checkpoint).parent)] == [1, 2]
    resumed = msrl.train(None, [], resume=checkpoint)
    assert resumed.stopped_by is None and resumed.iterations == ITERATIONS
    assert _learning(resumed.metrics) == _learning(straight)


def test_a_second_signal_stops_at_once_and_keeps_the_last_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(Interrupted, match=r"a second SIGTERM: stopped at once .*last checkpoint .* kept") as caught:
        with Trainer(CONFIG, [f"runs_dir={tmp_path}", "checkpoint_every=2", *COMMON]) as trainer:
            _signal_after(trainer, 3, signal.SIGTERM, signal.SIGTERM)
            trainer.run()
    assert caught.value.signum == signal.SIGTERM
    saved = load_checkpoint(str(tmp_path / "ppo_cartpole" / "checkpoint.pt"))
    assert saved["iteration"] == 2  # iteration 3 ended, but the run stopped before checkpointing it
    assert not list((tmp_path / "ppo_cartpole").glob(".ckpt-*"))  # no half-written checkpoint left


def test_msrl_train_stopped_by_sigterm_says_where_to_continue_and_exits_143(tmp_path: Path) -> None:
    """The command under a real SIGTERM from outside: one line naming the checkpoint and the
    ``--resume`` command, exit status 128 + 15, and a checkpoint that verifies."""
    argv = [sys.executable, "-m", "msrl", "train", CONFIG, "--set", f"runs_dir={tmp_path}"]
    for override in [*COMMON[:-1], "total_env_steps=100000000"]:  # far more than the test waits for
        argv += ["--set", override]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "ppo_cartpole" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    checkpoint = tmp_path / "ppo_cartpole" / "checkpoint.pt"
    line = err.strip().splitlines()[-1]
    assert line.startswith("msrl: stopped by SIGTERM at iteration ")
    assert f"continue with: msrl train --resume {checkpoint}" in line
    saved = load_checkpoint(str(checkpoint))
    assert saved["iteration"] == len(metrics.read_text().splitlines()) >= 2
    assert "trained" in out and "evaluation" not in out.lower()


@pytest.mark.slow  # two embedded-Ray runs and a resume, about 40 s: the default suite's 6-minute budget
def test_a_distributed_run_stopped_mid_run_finishes_what_its_workers_started_and_continues_exactly(
    tmp_path: Path,
) -> None:
    """Under ``single_learner_coarse`` the rollouts may start the next iteration before the driver
    has the current one: a stop then runs that iteration too before the checkpoint, so the
    checkpoint holds no iteration in flight and the continuation ends as the run without a stop."""
    common = [*COMMON, "policy=single_learner_coarse", "checkpoint_every=0"]
    straight = msrl.train(CONFIG, [f"runs_dir={tmp_path / 'straight'}", *common]).metrics
    with Trainer(CONFIG, [f"runs_dir={tmp_path / 'stopped'}", *common]) as trainer:
        _signal_after(trainer, 2, signal.SIGTERM)
        trainer.run()
        started_early = trainer.iteration == 3
        assert trainer.iteration in (2, 3) and trainer.stop_requested == "SIGTERM"
        checkpoint = trainer.directory.checkpoint_path
    assert started_early  # iteration 2 let iteration 3 start early: the stop waited for it
    resumed = msrl.train(None, [], resume=checkpoint)
    assert _learning(resumed.metrics) == _learning(straight)
