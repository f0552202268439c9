"""The CPU speed benchmark prints msrl's profile beside its rows: where each run's training
seconds went, phase by phase, so a ratio to a peer comes with what bounds it."""

from __future__ import annotations

from benchmarks.training_speed import RunRecord, profile_table, ray_cpus


def test_the_profile_has_one_row_per_msrl_run_with_its_phases() -> None:
    ours, peer = RunRecord("msrl", 3), RunRecord("SB3", 3)
    ours.train_seconds, ours.phase_seconds = 3.4, {"env": 0.31, "inference": 0.52, "learn": 2.11}
    peer.train_seconds = 60.0
    rows = [line for line in profile_table([ours, peer]).splitlines() if line.startswith("| 3 ")]
    assert rows == ["| 3 | 3.40 | 0.31 | 0.52 | 0.00 | 2.11 | 0.00 |"]


def test_the_ray_shared_with_rllib_offers_what_the_msrl_policy_reserves() -> None:
    assert ray_cpus([]) == 2  # local: one process
    assert ray_cpus(["policy=async_single_learner"]) == 3  # two actors and a learner
