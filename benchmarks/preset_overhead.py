"""What does each distribution policy cost on one machine, for the same PPO run?

For every preset (and ``local`` as the baseline) the quick-start config trains
for ``--budget`` env steps on an embedded Ray, and the table reports env
steps/s (first iteration left out: it includes worker start-up), the ratio to
``local``, and where the time of an iteration went: env / inference / learn /
buffer / communication (each the slowest replica's, summed over fragments'
phases; communication is time spent waiting for or sending values between
fragments).  The per-step round trip of each transport is ``benchmarks.transport_latency``.

    python -m benchmarks.preset_overhead --budget 65536
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import torch

from benchmarks.harness import REPO, interleave, machine_info, table_head, table_row

CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")

LAYOUTS = {
    "local": ["policy=local"],
    "single_learner_coarse": ["policy=single_learner_coarse"],
    "single_learner_fine": ["policy=single_learner_fine"],
    "multi_learner": ["policy=multi_learner"],
    "gpu_only (device=cpu)": ["policy=gpu_only", "policy.device=cpu"],
    "async_single_learner": ["policy=async_single_learner"],
}
PHASES = ["env", "inference", "learn", "buffer", "communication"]


def run_layout(overrides: list[str], budget: int, runs_dir: str) -> dict[str, float]:
    import msrl

    warmup, *records = msrl.train(
        CONFIG,
        [
            f"runs_dir={runs_dir}",
            "progress=false",
            "eval_episodes=0",
            "checkpoint_every=0",
            f"total_env_steps={budget}",
            *overrides,
        ],
    ).metrics
    wall = sum(r["wall_time"] for r in records)
    steps = records[-1]["env_steps"] - warmup["env_steps"]
    row = {"steps_per_s": steps / wall}
    for phase in PHASES:
        row[phase] = sum(r.get(f"time_{phase}", 0.0) for r in records) / wall
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=65536, help="env steps per layout")
    parser.add_argument("--only", nargs="*", choices=sorted(LAYOUTS), help="layouts to run (default: all)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per layout, interleaved; the table shows the median run (by env steps/s)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.only or list(LAYOUTS)
    with tempfile.TemporaryDirectory() as runs_dir:

        def measure(name: str) -> dict[str, float]:
            print(f"running {name} ...", file=sys.stderr)
            return run_layout(LAYOUTS[name], args.budget, runs_dir)

        # interleaved rounds, so that a slow spell of a shared machine hits every layout alike
        runs = interleave({name: lambda name=name: measure(name) for name in names}, args.repeats, alternate=False)
    rows = {name: sorted(found, key=lambda row: row["steps_per_s"])[len(found) // 2] for name, found in runs.items()}
    base = rows.get("local", {}).get("steps_per_s")
    print(
        f"\n{machine_info(('torch',))}; budget {args.budget:,} env steps, "
        f"median of {args.repeats} interleaved runs per layout\n"
    )
    print(table_head(["layout", "env steps/s", "vs local", *PHASES], "l" * (3 + len(PHASES))))
    for name, row in rows.items():
        ratio = f"{row['steps_per_s'] / base:.2f}x" if base else "-"
        print(table_row([name, f"{row['steps_per_s']:,.0f}", ratio, *(f"{row[p]:.0%}" for p in PHASES)]))
    print(
        "\nPhase columns: share of wall time (slowest replica per fragment, summed over fragments,"
        " so they may exceed 100%)."
    )


if __name__ == "__main__":
    main()
