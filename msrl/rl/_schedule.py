"""Schedules over training."""

from __future__ import annotations


def linear_lr(learning_rate: float, update: int, num_updates: int) -> float:
    """The learning rate of update ``update`` (from 0) of ``num_updates`` when it decays linearly from
    ``learning_rate`` towards 0 (CleanRL's and SB3's PPO annealing), never below 0.  ``num_updates``
    is ``RunInfo.num_updates`` of the learner's batch, so every policy anneals over the same run."""
    return learning_rate * max(0.0, 1.0 - update / num_updates)
