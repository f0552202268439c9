"""What is deferring PPO's diagnostics worth?  Measured inside one run.

This VM's speed drifts by 10-50% between runs, more than the effect, so the
two variants alternate *within* one run: the learner computes its diagnostics
inline for 8 updates, then deferred (after the new weights have been sent) for
8, and so on.  The table compares the median iteration wall time of the two
kinds of block (the first iteration of each block is left out: it still waits
on the previous block's weights).

    python -m benchmarks.deferred_diagnostics --policy single_learner_coarse local
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from algorithms.ppo import PPO, PPOLearner
from benchmarks.harness import REPO, table_head, table_row
from msrl import Deferred

BLOCK = 8


class AlternatingLearner(PPOLearner):
    def learn(self, batch):
        metrics = super().learn(batch)  # a Deferred under an executor; the updates counter has moved on
        inline = (self.updates // BLOCK) % 2 == 0
        return metrics.resolve() if inline and isinstance(metrics, Deferred) else metrics


class AlternatingPPO(PPO):
    """PPO whose learner alternates between inline and deferred diagnostics every 8 updates."""

    def __init__(self, config, run=None) -> None:
        super().__init__(config, run)
        self.learner.__class__ = AlternatingLearner


def measure(policy: str, budget: int) -> tuple[float, float, int]:
    import msrl

    with tempfile.TemporaryDirectory() as runs_dir:
        records = msrl.train(
            str(REPO / "configs" / "ppo_cartpole.yaml"),
            [
                f"runs_dir={runs_dir}",
                "progress=false",
                "eval_episodes=0",
                "checkpoint_every=0",
                f"total_env_steps={budget}",
                f"policy={policy}",
                "algorithm=benchmarks.deferred_diagnostics:AlternatingPPO",
            ],
        ).metrics
    inline, deferred = [], []
    for index, record in enumerate(records[1:], start=1):
        update = index + 1  # record i holds update i + 1
        if update % BLOCK:  # not the first iteration of a block
            (inline if (update // BLOCK) % 2 == 0 else deferred).append(record["wall_time"])
    return statistics.median(inline), statistics.median(deferred), len(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", nargs="+", default=["single_learner_coarse", "local"])
    parser.add_argument("--budget", type=int, default=400_000, help="env steps per run")
    args = parser.parse_args()
    rows = [(policy, *measure(policy, args.budget)) for policy in args.policy]
    print(table_head(["policy", "iterations", "inline diagnostics (ms)", "deferred (ms)", "deferred / inline"]))
    for policy, inline, deferred, count in rows:
        print(table_row([policy, count, f"{inline * 1e3:.1f}", f"{deferred * 1e3:.1f}", f"{deferred / inline:.3f}"]))


if __name__ == "__main__":
    main()
