"""The schedule: which worker iterations the driver queues, and which it waits for, per iteration
of the run.  One class per mode, chosen from ``SCHEDULES`` by the policy's ``mode``; nothing else
in the runtime branches on it.

``SyncSchedule`` runs every replica's iteration k together.  ``AsyncSchedule`` keeps the replicas
that do not produce the run's output (the actors) one iteration ahead of those that do (the
learner): their weights input is taken stale-ok, so they collect the next rollout while the learner
learns on the last one.
"""

from __future__ import annotations

from typing import Any

from cluster._liveness import Liveness
from cluster._reports import merge_reports
from fragments import FragmentedGraph, IterationResult, ReplicaId, ReplicaReport
from msrl.core import ValueKind


class Schedule:
    """What both modes share: each replica's queue of submitted iterations (``pending``, in order),
    how many it was given (``submitted``) and how many results were collected (``taken``), the
    reports kept for a later record (``finished``), and how many iterations the replicas holding
    the output node (the leader) completed."""

    def __init__(self, workers: dict[str, list[Any]], output_fragment: str, liveness: Liveness) -> None:
        self.workers, self.output_fragment, self.liveness = workers, output_fragment, liveness
        self.pending: dict[ReplicaId, list[Any]] = {}
        self.submitted: dict[ReplicaId, int] = {}
        self.taken: dict[ReplicaId, int] = {}
        self.finished: list[ReplicaReport] = []
        self.leader_iterations = 0

    @staticmethod
    def stale_ok(fdg: FragmentedGraph, output_fragment: str) -> dict[str, set[str]]:
        """Fragment -> the received nodes its replicas may take stale (none: every value is awaited)."""
        return {}

    def run_iteration(self, more: bool) -> list[ReplicaReport]:
        """The reports that make up the leader's next iteration (``more``: another call follows with
        no state read or write in between)."""
        raise NotImplementedError

    def merge(self, reports: list[ReplicaReport]) -> IterationResult:
        return merge_reports(reports, per_fragment_timings=len(self.workers) > 1)

    def drain(self) -> None:
        """Let in-flight iterations finish so every replica is between iterations; their reports
        join the next record."""
        calls = [(key, ref) for key, queued in self.pending.items() for ref in queued]
        if calls:
            self.finished.extend(self.liveness.wait_all(calls))
        for key, queued in self.pending.items():
            self.taken[key] = self.taken.get(key, 0) + len(queued)
        self.pending.clear()

    # -- shared steps ------------------------------------------------------------------------------
    def keys(self) -> list[ReplicaId]:
        return [ReplicaId(name, replica) for name, handles in self.workers.items() for replica in range(len(handles))]

    def submit(self, key: ReplicaId) -> None:
        number = self.submitted.get(key, 0)
        self.pending.setdefault(key, []).append(self.workers[key.fragment][key.replica].run_iteration.remote(number))
        self.submitted[key] = number + 1

    def may_submit(self, key: ReplicaId, done: int) -> bool:
        """An actor's iteration j ends on the weights of update j-1, so it may run at
        most one iteration past the leader's current one: whatever is in flight when
        the leader returns can then finish (a checkpoint waits for it) without
        another update."""
        return key.fragment == self.output_fragment or self.submitted.get(key, 0) <= done + 1

    def submit_idle(self, done: int) -> None:
        """Queue an iteration on every replica that has none queued and may run one."""
        for key in self.keys():
            if not self.pending.get(key) and self.may_submit(key, done):
                self.submit(key)

    def take_finished(self) -> list[ReplicaReport]:
        reports, self.finished = self.finished, []
        return reports

    def collect(self, key: ReplicaId) -> tuple[int, ReplicaReport]:
        """The oldest queued iteration of ``key``, finished: its number among the replica's collected
        results, and its report."""
        index = self.taken.get(key, 0)
        self.taken[key] = index + 1
        return index, self.liveness.result(key, self.pending[key].pop(0))


class SyncSchedule(Schedule):
    """Every replica's iteration k makes the run's iteration k."""

    def run_iteration(self, more: bool) -> list[ReplicaReport]:
        """One result from every replica.  With ``more`` the next iteration is queued on every
        worker now, so each starts it the moment it finishes this one instead of after a round
        trip through the driver; it has no effect on what is computed.  Waits on any replica, so
        a failing one is reported at once instead of leaving the others blocked."""
        done = self.leader_iterations
        self.submit_idle(done)
        if more:
            for key in self.keys():
                if len(self.pending[key]) < 2:
                    self.submit(key)
        reports = self.take_finished()
        awaited = set(self.keys())
        while awaited:
            by_ref = {refs[0]: key for key, refs in self.pending.items() if refs and key in awaited}
            key = by_ref[self.liveness.wait_one(list(by_ref))]
            reports.append(self.collect(key)[1])
            awaited.discard(key)
        self.leader_iterations += 1
        return reports


class AsyncSchedule(Schedule):
    """The leader's iteration k, with the actors' rollouts up to it; the actors run ahead."""

    def __init__(self, workers: dict[str, list[Any]], output_fragment: str, liveness: Liveness) -> None:
        super().__init__(workers, output_fragment, liveness)
        self.last_lag = 0.0

    @staticmethod
    def stale_ok(fdg: FragmentedGraph, output_fragment: str) -> dict[str, set[str]]:
        """The values the output fragment broadcasts back (weights) may be stale for their receivers."""
        stale: dict[str, set[str]] = {}
        for interface in fdg.interfaces:
            if (
                interface.src == output_fragment
                and interface.dst != output_fragment
                and interface.kind is ValueKind.GLOBAL
            ):
                stale.setdefault(interface.dst, set()).add(interface.ref.node)
        return stale

    def run_iteration(self, more: bool) -> list[ReplicaReport]:
        """The leader's report, taking the actors' as they come (each record reports the actors'
        iterations up to the leader's, so every record counts steps); actors keep collecting while
        the learner learns.  ``more`` changes nothing here: the actors already run ahead."""
        done = self.leader_iterations  # this call completes the leader's iteration ``done``
        self.submit_idle(done)
        reports = self.take_finished()
        awaited = {key for key in self.keys() if key.fragment == self.output_fragment}
        leader_in = False
        while awaited:
            by_ref = {refs[0]: key for key, refs in self.pending.items() if refs}
            key = by_ref[self.liveness.wait_one(list(by_ref))]
            index, report = self.collect(key)
            actor = key.fragment != self.output_fragment
            if actor and index > done:
                self.finished.append(report)  # a rollout for the next update: reported with it
            else:
                reports.append(report)
            awaited.discard(key)
            leader_in = leader_in or not actor
            if leader_in:
                # The update consumed every actor's rollout ``done``; those iterations have sent
                # their data and end on older weights, so their reports (env steps) join this
                # record rather than a later one that would then count no steps.
                awaited = self._actors_behind(done)
            if actor and self.may_submit(key, done):
                self.submit(key)
        self.leader_iterations += 1
        return reports

    def merge(self, reports: list[ReplicaReport]) -> IterationResult:
        """As the sync merge, plus ``policy_lag``: how many updates old the actors' weights were."""
        result = super().merge(reports)
        lags = [r.policy_lag for r in reports if r.output is None and not r.aborted]
        if lags:  # an update may land before the rollout that fed it reports back
            self.last_lag = sum(lags) / len(lags)
        result.component_metrics["policy_lag"] = self.last_lag
        return result

    def _actors_behind(self, iteration: int) -> set[ReplicaId]:
        """The actor replicas whose report of ``iteration`` is still to be collected."""
        return {
            key
            for key in self.keys()
            if key.fragment != self.output_fragment and self.taken.get(key, 0) <= iteration and self.pending.get(key)
        }


SCHEDULES: dict[str, type[Schedule]] = {"sync": SyncSchedule, "async": AsyncSchedule}
"""The schedule of each policy mode (``DistributionPolicy.mode``)."""
