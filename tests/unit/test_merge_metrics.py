"""Metrics of replicated fragments merge into what one process stepping every
environment would report: per-episode means weighted by episodes finished."""

from __future__ import annotations

import numpy as np
import pytest

import msrl.envs
from cluster import merge_replica_metrics


def test_episode_means_are_weighted_by_episodes_finished():
    merged = merge_replica_metrics(
        [
            {"episode_return": 10.0, "episode_length": 10.0, "episodes": 3, "policy_loss": 1.0},
            {"episode_return": 50.0, "episode_length": 50.0, "episodes": 1},
            {"policy_loss": 3.0, "note": "text", "bad": float("nan")},  # a replica that finished no episode
        ]
    )
    assert merged == {"episode_return": 20.0, "episode_length": 20.0, "episodes": 4.0, "policy_loss": 2.0}


def test_two_env_replicas_merge_to_the_whole_batch():
    """Two CartPole replicas stepped apart, merged, against the finished episodes of both."""
    rng = np.random.default_rng(0)
    replicas = [msrl.envs.make("CartPole-v1", 4, seed=s) for s in (1, 2)]
    finished_returns = []
    running = [np.zeros(4), np.zeros(4)]
    for _ in range(60):
        for env, ret in zip(replicas, running):
            _, reward, terminated, truncated = env.step(rng.integers(0, 2, size=4))
            ret += reward
            done = (terminated + truncated) > 0
            finished_returns.extend(ret[done].tolist())
            ret[done] = 0.0
    per_replica = [env.metrics() for env in replicas]
    unweighted = np.mean([m["episode_return"] for m in per_replica])
    assert unweighted != pytest.approx(np.mean(finished_returns))  # the case where weighting matters
    merged = merge_replica_metrics(per_replica)
    assert merged["episodes"] == len(finished_returns)
    assert merged["episode_return"] == pytest.approx(np.mean(finished_returns))
