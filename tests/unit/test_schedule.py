"""The Ray runtime's schedules without Ray: which worker iterations the driver queues and which
it waits for.  Workers are stand-ins whose ``run_iteration.remote(n)`` returns a ref naming the
replica and the iteration; every ref is finished, and a wait returns the oldest one."""

from __future__ import annotations

from typing import Any

from cluster import SCHEDULES, AsyncSchedule, SyncSchedule
from fragments import ReplicaId, ReplicaReport


class _Method:
    def __init__(self, key: ReplicaId, log: list[tuple[str, int, int]]) -> None:
        self.key, self.log = key, log

    def remote(self, number: int) -> tuple[str, int, int]:
        self.log.append((*self.key, number))
        return (*self.key, number)


class _Handle:
    def __init__(self, key: ReplicaId, log: list[tuple[str, int, int]]) -> None:
        self.run_iteration = _Method(key, log)


class _Liveness:
    """Every call finished; the oldest submitted first."""

    def __init__(self, log: list[tuple[str, int, int]]) -> None:
        self.log = log

    def wait_one(self, refs: list[Any]) -> Any:
        return min(refs, key=self.log.index)

    def wait_all(self, calls: list[tuple[ReplicaId, Any]]) -> list[ReplicaReport]:
        return [self.result(key, ref) for key, ref in calls]

    def result(self, key: ReplicaId, ref: tuple[str, int, int]) -> ReplicaReport:
        fragment, replica, number = ref
        assert isinstance(key, ReplicaId) and key == ReplicaId(fragment, replica)  # the replica the ref came from
        leader = fragment == "learner"
        return ReplicaReport(
            fragment,
            replica,
            output={"update": number} if leader else None,
            env_steps=0 if leader else 4,
            policy_lag=0.0 if leader else float(min(number, 1)),
            timings={"learn" if leader else "env": 1.0},
        )


def _schedule(kind: type, actors: int = 2) -> tuple[Any, list[tuple[str, int, int]]]:
    log: list[tuple[str, int, int]] = []
    workers = {
        "rollout": [_Handle(ReplicaId("rollout", r), log) for r in range(actors)],
        "learner": [_Handle(ReplicaId("learner", 0), log)],
    }
    return kind(workers, "learner", _Liveness(log)), log


def test_the_mode_table_names_each_schedule():
    assert SCHEDULES == {"sync": SyncSchedule, "async": AsyncSchedule}


def test_replicas_are_keyed_by_fragment_and_index():
    schedule, _ = _schedule(SyncSchedule)
    keys = schedule.keys()
    assert keys == [ReplicaId("rollout", 0), ReplicaId("rollout", 1), ReplicaId("learner", 0)]
    assert all(isinstance(key, ReplicaId) for key in keys)
    assert [(key.fragment, key.replica) for key in keys] == [("rollout", 0), ("rollout", 1), ("learner", 0)]
    assert str(keys[1]) == "rollout[1]"  # how messages name a replica


def test_sync_takes_iteration_k_of_every_replica():
    schedule, log = _schedule(SyncSchedule)
    for k in range(3):
        reports = schedule.run_iteration(more=False)
        assert sorted((r.fragment, r.replica) for r in reports) == [("learner", 0), ("rollout", 0), ("rollout", 1)]
        result = schedule.merge(reports)
        assert result.output == {"update": k} and result.env_steps == 8
        assert "policy_lag" not in result.component_metrics
    assert sorted(log) == sorted(
        (f, r, k) for k in range(3) for f, r in [("rollout", 0), ("rollout", 1), ("learner", 0)]
    )


def test_sync_with_more_queues_the_next_iteration_without_computing_it_twice():
    schedule, log = _schedule(SyncSchedule)
    schedule.run_iteration(more=True)
    assert len(log) == 6  # iterations 0 and 1 of every replica queued
    schedule.run_iteration(more=False)
    assert len(log) == 6 and schedule.leader_iterations == 2
    schedule.drain()
    assert schedule.pending == {}


def test_async_actors_run_at_most_one_iteration_ahead_and_report_with_the_update():
    schedule, log = _schedule(AsyncSchedule)
    steps = []
    for k in range(4):
        result = schedule.merge(schedule.run_iteration(more=False))
        assert result.output == {"update": k}
        steps.append(result.env_steps)
        actor_runs = max(n for f, _, n in log if f == "rollout")
        assert actor_runs <= k + 1  # an actor's iteration j ends on update j-1's weights
    assert steps[0] == 8 and sum(steps) == 8 * 4  # every rollout reported once, with the update it fed
    assert result.component_metrics["policy_lag"] == 1.0
