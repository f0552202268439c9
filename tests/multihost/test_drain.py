"""A worker host with notice on the testbed (slow tier: a cluster of its own): Ray drains it, as its
autoscaler does before a preemption (``ray drain-node`` with a deadline), while a run has a replica
there. The run checkpoints at the next iteration boundary, starts its workers again on the hosts
Ray still schedules on, and goes on from that checkpoint: no iteration lost or done twice, no
restart counted. Run with ``pytest -m slow tests/multihost``."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from multihost_helpers import REPO, train_command

from testbed import Testbed

pytestmark = pytest.mark.slow

ITERATIONS = 40
STEPS = ITERATIONS * 64 * 32  # the quick-start config's 64 envs x 32 steps an iteration


def test_a_drained_hosts_fragments_move_at_the_next_boundary_and_nothing_is_lost(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = runs / "ppo_cartpole"
    with Testbed(hosts=3, cpus=2) as bed:
        command = train_command(
            bed.head_address,
            runs,
            "policy=single_learner_coarse",
            "policy.placement=SPREAD",
            f"total_env_steps={STEPS}",
            "checkpoint_every=1000",
            "eval_episodes=0",
        )
        proc = bed.popen(0, command, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            metrics = run_dir / "metrics.jsonl"
            while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the run recorded no third iteration in 240 s"
                time.sleep(0.1)
            before = (run_dir / "placement.txt").read_text()
            drained = bed.address(2)
            assert f"on node {drained} " in before, before  # SPREAD: a replica on every host
            bed.drain(2, deadline_s=300, reason="spot instance notice")
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    assert f"msrl: draining {drained} (" in err and f"msrl: moved off {drained} in " in err, err[-4000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == list(range(1, ITERATIONS + 1))  # each once, none lost
    assert records[-1]["restarts"] == 0 and records[-1]["lost_env_steps"] == 0
    after = (run_dir / "placement.txt").read_text()
    assert f"on node {drained} " not in after and after.count("fragment ") == 3, after
