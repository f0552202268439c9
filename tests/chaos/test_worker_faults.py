"""Lost fragment workers on the embedded Ray, the cases CI runs: a rollout worker killed
twice sends the run back to its last checkpoint on fresh workers, twice, and the run goes on to the
same results as one without faults (about 65 s with its undisturbed twin: CI's landing tier, after
the default suite); past ``max_restarts`` the run stops with one line, its checkpoint kept, and a
worker that cannot build its fragment is one line (the default suite).  A killed learner, a stopped
(SIGSTOP) worker and the longer cases are in ``test_chaos_slow.py``.

The workers are real Ray actor processes, killed with real signals between iterations, while the
other replicas wait on them (the learner for the killed rollout's trajectories, the rollouts for the
killed learner's weights)."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

import msrl
from cluster import SOCKET_ROOT
from msrl import WorkerLostError
from msrl.app import Trainer, read_metrics

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml")
ITERATIONS = 6
COMMON = [
    "progress=false",
    "eval_episodes=0",
    "policy=single_learner_coarse",
    "checkpoint_every=2",
    "algo.num_envs=8",
    "algo.num_steps=32",
    f"total_env_steps={ITERATIONS * 8 * 32}",
]
STEPS_PER_ITERATION = 8 * 32
TIMING = ("wall_time", "steps_per_s", "restarts", "lost_env_steps")


def _signal_between(trainer: Trainer, faults: dict[int, tuple[str, signal.Signals]]) -> list[dict]:
    """Step ``trainer`` to the end, sending each fault's signal to the last replica of its fragment
    before the step that starts at that iteration."""
    records = []
    while not trainer.done:
        fault = faults.pop(trainer.iteration, None)
        if fault is not None:
            fragment, signum = fault
            os.kill(trainer.runtime.worker_pids()[fragment][-1], signum)
        records.append(trainer.step())
    trainer.run()  # the final checkpoint
    assert not faults, f"faults not injected: {faults}"
    return records


def _learning(records: list[dict]) -> list[dict]:
    """The records without what depends on timing and on faults."""
    return [{k: v for k, v in record.items() if k not in TIMING and not k.startswith("time_")} for record in records]


@pytest.mark.slow  # about 65 s with its undisturbed twin: the default suite's 6-minute budget (README, Tests)
@pytest.mark.landing
def test_a_rollout_worker_killed_twice_is_recovered_from_and_the_run_learns_as_without_faults(
    undisturbed: list[dict], tmp_path: Path
) -> None:
    sockets_before = set(Path(SOCKET_ROOT).glob("msrl-*"))
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", *COMMON]) as trainer:
        # killed after iterations 3 and 5: the checkpoints before them are at 2 and 4
        _signal_between(trainer, {3: ("rollout", signal.SIGKILL), 5: ("rollout", signal.SIGKILL)})
        run_dir = trainer.run_dir
    metrics = read_metrics(run_dir)
    assert [r["iteration"] for r in metrics] == list(range(1, ITERATIONS + 1))  # rewound, then redone once
    assert metrics[-1]["restarts"] == 2
    # each kill costs the iterations since its checkpoint: one, or two where the killed worker had
    # already finished the next iteration queued ahead of time, so its loss is found a step later
    assert metrics[-1]["lost_env_steps"] in {n * STEPS_PER_ITERATION for n in (2, 3, 4)}
    assert _learning(metrics) == _learning(undisturbed)  # recovered exactly: same losses, same returns
    # the killed workers could not remove their socket directories; the driver did
    left = set(Path(SOCKET_ROOT).glob("msrl-*")) - sockets_before
    assert not [directory for directory in left if _abandoned(directory)]


def test_past_max_restarts_the_run_stops_with_one_line_and_its_checkpoint_kept(tmp_path: Path) -> None:
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", *COMMON, "max_restarts=0"]) as trainer:
        for _ in range(3):
            trainer.step()
        checkpoint = Path(trainer.run_dir) / "checkpoint.pt"
        saved = checkpoint.read_bytes()
        os.kill(trainer.runtime.worker_pids()["rollout"][0], signal.SIGKILL)
        with pytest.raises(WorkerLostError) as caught:
            for _ in range(3):  # see the stopped-worker case: the loss may be found a step later
                trainer.step()
    message = str(caught.value)
    assert "\n" not in message
    assert re.search(r"fragment rollout\[0\] on node [0-9.]+ was lost", message) and "max_restarts=0" in message
    assert checkpoint.read_bytes() == saved
    assert msrl.load(checkpoint) is not None  # still verifies


def _abandoned(directory: Path) -> bool:
    """Whether a socket directory outlived its listener (tests running beside this one have live ones)."""
    sockets = list(directory.glob("*.sock"))
    return bool(sockets) and not any(_connectable(sock) for sock in sockets)


def _connectable(path: Path) -> bool:
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def test_a_worker_that_cannot_build_its_fragment_is_one_line_not_a_failed_actor(tmp_path: Path) -> None:
    """The worker's constructor error reaches the driver as the msrl error it is (Ray would report a
    failed actor creation, with a traceback), from every replica without an unhandled-error report."""
    with pytest.raises(msrl.BuildError) as caught:
        msrl.train(CONFIG, [f"runs_dir={tmp_path}", *COMMON, "algo.num_envs=10000000000"])
    message = str(caught.value)
    assert "\n" not in message and "of fragment 'rollout' needs more memory than there is" in message
    assert list(tmp_path.iterdir()) == []
