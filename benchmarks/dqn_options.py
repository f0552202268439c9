"""What does each of DQN's options buy on CartPole?  ``configs/dqn_cartpole.yaml`` (CleanRL's
settings) at a reduced budget, each option on alone and all together, against the plain config,
over the same seeds: the greedy return at the end (mean ± std over seeds), how many seeds' greedy
returns reached 475, and the env steps until the mean of the last 10 training episodes first reached
475 (``msrl.app.gate``'s rule; mean over the seeds that reached it, with how many did).  The
options: ``double_dqn``, ``dueling``, ``prioritized_replay``, ``n_step`` (3) and ``distributional``
(C51 on CleanRL ``c51.py``'s CartPole support: 101 atoms from -100 to 100); all five are
``configs/dqn_rainbow_cartpole.yaml``.

    python -m benchmarks.dqn_options --seeds 5 --steps 30000
    python -m benchmarks.dqn_options --seeds 5 --steps 500000 --learning-starts 10000   # CleanRL's budget
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import msrl
from benchmarks.harness import REPO, command_line, machine_info, markdown_table
from msrl.app.gate import record_of

THRESHOLD = 475.0

VARIANTS: dict[str, list[str]] = {
    "plain": [],
    "double_dqn": ["algo.double_dqn=true"],
    "dueling": ["algo.dueling=true"],
    "prioritized_replay": ["algo.prioritized_replay=true"],
    "n_step": ["algo.n_step=3"],
    "distributional": ["algo.distributional=true", "algo.atoms=101", "algo.v_min=-100", "algo.v_max=100"],
    "all five": [
        "algo.double_dqn=true",
        "algo.dueling=true",
        "algo.prioritized_replay=true",
        "algo.n_step=3",
        "algo.distributional=true",
        "algo.atoms=101",
        "algo.v_min=-100",
        "algo.v_max=100",
    ],
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--learning-starts", type=int, default=2_000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"command: {command_line('benchmarks.dqn_options', argv)}")
    print(f"machine: {machine_info()}\n")
    returns: dict[str, list[float]] = {name: [] for name in VARIANTS}
    reached: dict[str, list[int]] = {name: [] for name in VARIANTS}  # env steps to 475 in training
    with tempfile.TemporaryDirectory() as runs:
        for seed in range(args.seeds):  # seeds outermost: a drifting machine hits every variant alike
            for name, overrides in VARIANTS.items():
                run = msrl.train(
                    str(REPO / "configs" / "dqn_cartpole.yaml"),
                    [
                        *overrides,
                        f"seed={seed}",
                        f"total_env_steps={args.steps}",
                        f"algo.learning_starts={args.learning_starts}",
                        f"eval_episodes={args.eval_episodes}",
                        f"runs_dir={runs}",
                        "progress=false",
                        "checkpoint_every=0",
                        "algo.compile=false",  # short runs: a background build would only take a core
                    ],
                )
                assert run.evaluation is not None
                returns[name].append(run.evaluation.mean)
                point = record_of(run, "dqn_cartpole", seed).reached(THRESHOLD)
                if point is not None:
                    reached[name].append(point.env_steps)
                steps_to = f"{point.env_steps:,}" if point else "not reached"
                print(f"  {name:20s} seed {seed}: greedy {run.evaluation.mean:7.1f}, 475 at {steps_to}", flush=True)
    rows = [
        [
            name,
            f"{statistics.fmean(values):.1f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.1f}",
            f"{sum(v >= THRESHOLD for v in values)}/{len(values)}",
            f"{statistics.fmean(reached[name]):,.0f} ({len(reached[name])}/{len(values)})" if reached[name] else "—",
            " ".join(f"{v:.0f}" for v in values),
        ]
        for name, values in returns.items()
    ]
    print()
    header = ["options", "greedy return", "seeds at 475+", "env steps to 475 in training", "per seed"]
    print(markdown_table(header, rows, "lrrrl"))


if __name__ == "__main__":
    main()
