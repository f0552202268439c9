"""Elastic replicas on the testbed (slow tier): a run whose policy allows 1..2 rollout replicas
loses the host of one, goes on with one from its last checkpoint, and grows back to two at a
checkpoint boundary once another host joins; every iteration is recorded once, each with the
replicas it ran with.  Run with ``pytest -m slow tests/multihost``."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from multihost_helpers import REPO, train_command

import msrl
from testbed import Testbed

pytestmark = pytest.mark.slow

LIVENESS_S = 20


class _Lines:
    """The lines a process writes to a pipe, read as they come."""

    def __init__(self, pipe) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(iter(pipe.readline, "")), daemon=True)
        self.thread.start()

    def wait_for(self, text: str, proc: subprocess.Popen, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            found = [line for line in self.lines if text in line]
            if found:
                return found[0]
            assert proc.poll() is None, "".join(self.lines)[-4000:]
            assert time.monotonic() < deadline, f"no {text!r} within {timeout_s:.0f} s: {''.join(self.lines)[-4000:]}"
            time.sleep(0.2)


def _records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_for_records(run_dir: Path, replicas: int, count: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(r.get("replicas/rollout") == replicas for r in _records(run_dir)) < count:
        assert proc.poll() is None, f"the run ended ({proc.returncode})"
        assert time.monotonic() < deadline, f"fewer than {count} iterations with {replicas} replicas"
        time.sleep(0.2)


def test_an_elastic_run_shrinks_when_a_host_is_lost_and_grows_when_it_joins_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = runs / "ppo_cartpole"
    bed = Testbed(hosts=3, cpus=2)  # the third host joins later: a killed host's namespace cannot start again
    try:
        bed.up(start_ray=False)
        bed.start_ray([0, 1], alive=2)
        command = train_command(
            bed.head_address,
            runs,
            "policy={preset: single_learner_coarse, placement: SPREAD, actors: '1..2'}",
            "total_env_steps=2000000",
            "checkpoint_every=2",
            f"liveness_timeout_s={LIVENESS_S}",
        )
        proc = bed.popen(0, command, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            err = _Lines(proc.stderr)
            # two hosts of 2 CPUs: the learner's and both actors' fit
            err.wait_for("msrl: elastic policy: rollout 2 of 1..2 replicas, as the cluster holds (2 nodes", proc, 120)
            _wait_for_records(run_dir, replicas=2, count=2, proc=proc, timeout_s=120)
            bed.kill_host(1)
            shrank = err.wait_for("rollout 2 -> 1 replicas", proc, LIVENESS_S + 60)
            _wait_for_records(run_dir, replicas=1, count=3, proc=proc, timeout_s=120)
            bed.start_ray([2], alive=2)
            grew = err.wait_for("rollout 1 -> 2 replicas", proc, 120)
            _wait_for_records(run_dir, replicas=2, count=4, proc=proc, timeout_s=120)
        finally:
            bed.send_signal(proc, signal.SIGTERM)  # a graceful stop: the iteration ends, then a checkpoint
            proc.wait(timeout=120)
            err.thread.join(timeout=10)
    finally:
        bed.down()
    assert proc.returncode == 128 + signal.SIGTERM, "".join(err.lines)[-4000:]
    assert "(the nodes that answer hold no more)" in shrank and "num_envs 64 as 1 x 64" in shrank, shrank
    assert "(the cluster grew to 2 nodes)" in grew and "num_envs 64 as 2 x 32" in grew, grew
    records = _records(run_dir)
    assert [r["iteration"] for r in records] == list(range(1, len(records) + 1))  # each once, none lost
    per_iteration = records[0]["env_steps"]
    assert [r["env_steps"] for r in records] == [per_iteration * r["iteration"] for r in records]
    counts = [int(r["replicas/rollout"]) for r in records]
    changes = [count for i, count in enumerate(counts) if i == 0 or count != counts[i - 1]]
    assert changes == [2, 1, 2], counts
    assert records[-1]["restarts"] == 1
    assert msrl.load(run_dir / "checkpoint.pt") is not None  # the stop's checkpoint verifies
    assert (run_dir / "placement.txt").read_text().count("fragment rollout[") == 2
