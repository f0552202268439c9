"""A dataset sharded across two hosts (slow tier): ``multi_learner``'s two learners, one on each
testbed host, each read the dataset from a directory both hosts see (a cluster's shared
filesystem), hold half its strata and sample half of every batch; their averaged gradients take the
steps one learner takes in one process with the whole batch.  Run with ``pytest -m slow
tests/multihost``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from multihost_helpers import REPO, output

import msrl
from msrl.app import record
from testbed import Testbed

pytestmark = pytest.mark.slow

IQL = str(REPO / "configs" / "iql_pendulum.yaml")
COMMON = [
    "progress=false",
    "total_env_steps=2560",  # 8 iterations of 5 gradient steps of 64
    "algo.gradient_steps=5",
    "algo.batch_size=64",
    "algo.hidden_sizes=[32, 32]",
    "algo.compile=false",
    "eval_episodes=0",
]


def test_two_learners_on_two_hosts_step_as_one_learner_with_their_batch(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    ddpg = msrl.train(
        str(REPO / "configs" / "ddpg_pendulum.yaml"),
        [f"runs_dir={tmp_path / 'ddpg'}", "progress=false", "total_env_steps=8", "eval_episodes=0"]
        + ["algo.learning_starts=100", "algo.hidden_sizes=[8, 8]", "algo.compile=false"],
    )
    data = shared / "pendulum-random"
    record(ddpg.checkpoint, 8, data, epsilon=1.0, seed=3)
    common = [f"algo.dataset={data}", *COMMON]

    one = msrl.train(IQL, [f"runs_dir={tmp_path / 'one'}", "policy=local", *common])
    runs = tmp_path / "runs"
    with Testbed(hosts=2, cpus=2, shared=[shared]) as bed:
        sets = [f"runs_dir={runs}", *common, "policy=multi_learner", "policy.learners=2"]
        sets.append("policy.placement=STRICT_SPREAD")  # one learner per host
        command = [sys.executable, "-m", "msrl", "train", IQL, "--address", bed.head_address]
        command += [a for s in sets for a in ("--set", s)]
        done = bed.run(0, command, cwd=str(REPO), timeout=300)
        text = output(done)
        assert done.returncode == 0, text[-3000:]
        placed = dict(re.findall(r"fragment (worker\[\d\]) on node ([0-9.]+) ", text))
        assert set(placed) == {"worker[0]", "worker[1]"}, text
        assert set(placed.values()) == {bed.address(0), bed.address(1)}, text

    across = msrl.load(runs / "iql_pendulum" / "checkpoint.pt")
    alone = msrl.load(one.checkpoint)
    assert across.learner.gradient_steps_taken == alone.learner.gradient_steps_taken == 40
    for network in ("policy", "critic", "value"):
        theirs = getattr(across.learner, network).state_dict()
        for key, value in getattr(alone.learner, network).state_dict().items():
            torch.testing.assert_close(theirs[key], value, rtol=1e-4, atol=1e-5)
