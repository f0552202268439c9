"""Host faults on the testbed (slow tier: each starts its own cluster of hosts): a worker host lost
with room left on the others, lost without room (one line naming it), a partition that heals
within the liveness timeout, and the head host lost (one line, then an exact resume on a new
cluster).  Run with ``pytest -m slow tests/multihost``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from multihost_helpers import REPO, train_command

import msrl
from testbed import Testbed

pytestmark = pytest.mark.slow

LIVENESS_S = 20


def _start(bed: Testbed, runs: Path, steps: int, driver: int = 0) -> subprocess.Popen:
    command = train_command(
        bed.head_address,
        runs,
        "policy=single_learner_coarse",
        "policy.placement=SPREAD",
        f"total_env_steps={steps}",
        "checkpoint_every=2",
        f"liveness_timeout_s={LIVENESS_S}",
    )
    return bed.popen(driver, command, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no {path} within {timeout_s:.0f} s"
        time.sleep(0.1)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("fault", ["killed", "link down"])
def test_a_lost_host_the_others_cannot_replace_stops_the_run_with_one_line_naming_it(fault: str, tmp_path: Path):
    runs = tmp_path / "runs"
    with Testbed(hosts=2, cpus=2) as bed:
        proc = _start(bed, runs, steps=2_000_000)
        checkpoint = runs / "ppo_cartpole" / "checkpoint.pt"
        _wait_for(checkpoint, proc)
        lost_at = time.monotonic()
        if fault == "killed":
            bed.kill_host(1)
        else:
            bed.set_link(1, up=False)
        _, err = proc.communicate(timeout=LIVENESS_S + 60)
        took = time.monotonic() - lost_at
    assert proc.returncode == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("msrl: error: ")]
    assert len(errors) == 1, err[-4000:]
    line = errors[0]
    # the lost worker's host named, and why the run cannot go on without it: the host does not answer,
    # or (where Ray had already dropped it) the cluster left is short of what the policy asks
    lost = "was lost" if fault == "killed" else f"answered no liveness check for {LIVENESS_S} s"
    assert f"on node {bed.address(1)} {lost}" in line and "the run cannot restart" in line, line
    assert f"node {bed.address(1)} (" in line or "in all but the cluster has" in line, line
    assert line.endswith("its last checkpoint kept"), line
    assert took < LIVENESS_S + 20, f"the run took {took:.0f} s to stop"
    assert msrl.load(checkpoint) is not None  # kept, and still verifies


def test_a_lost_host_is_replaced_by_the_others_and_the_run_finishes(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    steps = 40 * 2048
    with Testbed(hosts=3, cpus=2) as bed:
        proc = _start(bed, runs, steps=steps)
        _wait_for(runs / "ppo_cartpole" / "checkpoint.pt", proc)
        bed.kill_host(_a_worker_host_with_a_fragment(bed, runs / "ppo_cartpole" / "placement.txt"))
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    records = _records(runs / "ppo_cartpole")
    assert records[-1]["env_steps"] == steps and records[-1]["restarts"] == 1
    assert re.search(r"restart 1/\d+ from the checkpoint at iteration \d+", err), err[-2000:]


def _a_worker_host_with_a_fragment(bed: Testbed, placement: Path) -> int:
    """A host other than the head (which runs the driver) that holds a fragment replica."""
    addresses = set(re.findall(r"on node ([0-9.]+) ", placement.read_text()))
    hosts = [host for host in range(1, bed.hosts) if bed.address(host) in addresses]
    assert hosts, placement.read_text()
    return hosts[0]


def test_a_partition_that_heals_within_the_timeout_loses_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    steps = 30 * 2048
    with Testbed(hosts=2, cpus=2) as bed:
        proc = _start(bed, runs, steps=steps)
        _wait_for(runs / "ppo_cartpole" / "checkpoint.pt", proc)
        bed.set_link(1, up=False)
        time.sleep(3)
        bed.set_link(1, up=True)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    records = _records(runs / "ppo_cartpole")
    assert [r["iteration"] for r in records] == list(range(1, len(records) + 1))
    assert records[-1]["env_steps"] == steps and records[-1]["restarts"] == 0 and records[-1]["lost_env_steps"] == 0


KEYS = ["iteration", "env_steps", "policy_loss", "value_loss", "episode_return"]


def test_the_head_host_lost_stops_the_run_with_one_line_and_a_new_cluster_resumes_it_exactly(tmp_path: Path):
    runs = tmp_path / "runs"  # on a filesystem every host shares, as a cluster's NFS would be
    runs.mkdir()
    run_dir = runs / "ppo_cartpole"
    with Testbed(hosts=2, cpus=2, shared=[runs]) as bed:
        proc = _start(bed, runs, steps=2_000_000, driver=1)  # the driver on the worker host: it outlives the head
        _wait_for(run_dir / "checkpoint.pt", proc)
        lost_at = time.monotonic()
        bed.kill_host(0)
        _, err = proc.communicate(timeout=LIVENESS_S + 60)
        took = time.monotonic() - lost_at
    assert proc.returncode == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("msrl: error: ")]
    assert errors == [err.strip().splitlines()[-1]], err[-4000:]  # one line, and the last word
    line = errors[0]
    assert f"the cluster's head {bed.address(0)}:6379 (Ray's GCS) accepted no connection for {LIVENESS_S} s" in line
    assert line.endswith(f"continue it on a new cluster with: msrl train --resume {run_dir / 'checkpoint.pt'}"), line
    assert took < LIVENESS_S + 20, f"the run took {took:.0f} s to stop"
    stopped_at = msrl.load(run_dir / "checkpoint.pt")  # kept, and still verifies
    assert stopped_at is not None
    stopped = _records(run_dir)
    budget = stopped[-1]["env_steps"] + 4 * 2048  # four iterations past where the run stopped
    twin = runs / "twin"  # the uninterrupted run from that checkpoint: a copy, resumed as well
    shutil.copytree(run_dir, twin)
    resumed = {}
    with Testbed(hosts=2, cpus=2, shared=[runs]) as bed:  # a new cluster
        for directory in (run_dir, twin):
            command = [sys.executable, "-m", "msrl", "train", "--resume", str(directory / "checkpoint.pt")]
            command += ["--address", bed.head_address, "--set", f"total_env_steps={budget}"]
            done = bed.run(1, command, cwd=str(REPO))
            assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
            resumed[directory.name] = [[r[k] for k in KEYS] for r in _records(directory)]
    assert len(resumed["ppo_cartpole"]) == len(stopped) + 4, resumed
    assert resumed["ppo_cartpole"] == resumed["twin"]
