"""CI's one multi-host training run (the landing tier, `make test-landing`): a run spread over two
hosts, each with its own address, Ray node, /dev/shm and (the worker host) /tmp, and a testbed that
leaves nothing behind."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from multihost_helpers import REPO, output, train_command

import msrl
from testbed import Testbed, namespace_pids, namespaces

STEPS = 8192


@pytest.mark.landing  # two namespace hosts with Ray on each, 27-33 s: CI's tier after the default suite
def test_a_run_spread_over_two_hosts_trains_and_the_testbed_leaves_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with Testbed(hosts=2, cpus=2) as bed:
        command = train_command(
            bed.head_address,
            runs,
            "policy=single_learner_coarse",
            "policy.placement=SPREAD",
            f"total_env_steps={STEPS}",
            "checkpoint_every=2",
        )
        done = bed.run(0, command, cwd=str(REPO), timeout=240)
        text = output(done)
        assert done.returncode == 0, text[-3000:]
        placed = dict(re.findall(r"fragment (\w+\[\d\]) on node ([0-9.]+) ", text))
        assert set(placed) == {"rollout[0]", "rollout[1]", "learner[0]"}, text
        assert set(placed.values()) == {bed.address(0), bed.address(1)}  # SPREAD: both hosts hold fragments
        # The driver's host wrote the run directory; the worker host, whose /tmp is its own, cannot see it.
        assert bed.run(0, ["test", "-d", str(runs)]).returncode == 0
        assert bed.run(1, ["test", "-e", str(runs)]).returncode == 1
        name = bed.name
    run_dir = runs / "ppo_cartpole"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == STEPS and records[-1]["restarts"] == 0
    assert msrl.load(run_dir / "checkpoint.pt") is not None  # verified and loadable
    # Nothing of the testbed is left: no namespace, no process, no Ray directory.
    assert namespaces(name) == []
    assert all(namespace_pids(f"{name}-h{host}") == [] for host in range(2))
    assert not list(Path("/tmp").glob(f"{name}-*"))
