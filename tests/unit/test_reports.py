"""What a replica reports each iteration (``fragments.ReplicaReport``), made by the one
``Replica.iterate`` both runtimes use, and merged by the driver (``cluster.merge_reports``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cluster import merge_reports
from fragments import LocalRuntime, ReplicaReport
from msrl.app import load_config, make_runtime, plan

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml"


def report(fragment: str, replica: int, **fields) -> ReplicaReport:
    return ReplicaReport(fragment, replica, **fields)


def test_an_aborted_report_merges_as_nothing():
    reports = [
        report("learner", 0, output={"loss": 1.0}, metrics={"loss": 1.0}, timings={"learn": 2.0}),
        report("rollout", 0, metrics={"episodes": 2, "episode_return": 10.0}, timings={"env": 1.0}, env_steps=8),
        report("rollout", 1, aborted=True),
    ]
    result = merge_reports(reports, per_fragment_timings=True)
    assert result.output == {"loss": 1.0}
    assert result.env_steps == 8
    assert result.component_metrics == {"loss": 1.0, "episodes": 2.0, "episode_return": 10.0}
    assert result.timings == {"learn": 2.0, "env": 1.0}
    assert result.fragment_timings == {"learner": {"learn": 2.0}, "rollout": {"env": 1.0}}
    assert merge_reports([report("rollout", 0, aborted=True)], per_fragment_timings=False).env_steps == 0


def test_merged_timings_are_the_slowest_replicas():
    reports = [report("rollout", r, timings={"env": float(r + 1)}, env_steps=4) for r in range(3)]
    result = merge_reports(reports, per_fragment_timings=False)
    assert result.timings == {"env": 3.0} and result.env_steps == 12 and result.fragment_timings == {}


def test_time_moved_between_phases_keeps_the_total():
    moved = report("learner", 0, timings={"learn": 3.0}).with_time_moved("learn", "communication", 1.0)
    assert moved.timings == {"learn": 2.0, "communication": 1.0}
    assert report("rollout", 0, metrics={"episodes": 3}).episodes == 3.0


@pytest.fixture
def local_runtime():
    base = yaml.safe_load(CONFIG.read_text())
    config = load_config(None, ["algo.num_envs=4", "algo.num_steps=8", "policy=local"], base=base)
    runtime = make_runtime(plan(config))
    assert isinstance(runtime, LocalRuntime)
    yield runtime
    runtime.close()


def test_the_local_runtime_reports_through_replica_iterate(local_runtime):
    first = local_runtime.replica.iterate()
    assert (first.fragment, first.replica, first.aborted) == ("local", 0, False)
    assert first.env_steps == 4 * 8 and first.output is not None
    assert {"env", "inference", "learn"} <= set(first.timings)
    result = local_runtime.run_iteration()  # the same call, read as the run loop sees it
    assert result.env_steps == first.env_steps and "episode_return" in result.component_metrics


def test_a_replica_that_was_not_started_says_so(local_runtime):
    local_runtime.replica.running = None
    with pytest.raises(RuntimeError, match="replica 0 of fragment 'local' was not started"):
        local_runtime.replica.iterate()
