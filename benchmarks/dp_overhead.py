"""What each distribution policy costs on this machine, for the same PPO run.

For every preset (and ``local`` as the baseline) the quick-start config trains
for ``--budget`` env steps on an embedded Ray, and the table reports env
steps/s (first iteration left out: it includes worker start-up), the ratio to
``local``, and where the time of an iteration went: env / inference / learn /
buffer / communication (each the slowest replica's, summed over fragments'
phases; communication is time spent waiting for or sending values between
fragments).  Then the per-step round trip of the fine-grained policy's
transport: an observation batch up and an action batch down between two Ray
actors, over the same-node socket path msrl uses and over plain Ray actor
calls (the path between nodes).

    python benchmarks/dp_overhead.py --budget 65536
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
CONFIG = str(REPO_ROOT / "configs" / "ppo_cartpole.yaml")

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


# -- transport round trip ------------------------------------------------------------------------------
class _Peer:
    """One side of a ping-pong over msrl's transport classes."""

    def __init__(self, name: str) -> None:
        from cluster import DirectListener, Mailbox

        self.mailbox = Mailbox()
        self.listener = DirectListener(self.mailbox, name)
        self.sender = None
        self.other = None

    def path(self) -> str:
        return self.listener.path

    def pair(self, path: str, other) -> None:
        from cluster import DirectSender

        self.sender, self.other = DirectSender(path), other

    def deliver(self, node: str, src: int, seq: int, payload) -> None:
        self.mailbox.put(node, src, seq, payload)

    def echo(self, rounds: int, direct: bool) -> None:
        action = torch.zeros(32, dtype=torch.int64)
        for i in range(rounds):
            self.mailbox.take("obs", 0, i)
            self._send("act", i, action, direct)

    def ping(self, rounds: int, direct: bool) -> list[float]:
        obs = np.zeros((32, 4), dtype=np.float32)
        times = []
        for i in range(rounds):
            start = time.perf_counter()
            self._send("obs", i, obs, direct)
            self.mailbox.take("act", 0, i)
            times.append(time.perf_counter() - start)
        return times

    def _send(self, node: str, seq: int, payload, direct: bool) -> None:
        if direct:
            self.sender.deliver(node, 0, seq, payload)
        else:
            self.other.deliver.remote(node, 0, seq, payload)


def round_trip(rounds: int) -> dict[str, list[float]]:
    import ray

    peer_cls = ray.remote(num_cpus=0, max_concurrency=4)(_Peer)
    a, b = peer_cls.remote("a"), peer_cls.remote("b")
    ray.get([a.pair.remote(ray.get(b.path.remote()), b), b.pair.remote(ray.get(a.path.remote()), a)])
    out = {}
    for label, direct in (
        ("same-node socket (msrl per-step path)", True),
        ("Ray actor calls (cross-node path)", False),
    ):
        done = b.echo.remote(rounds, direct)
        times = ray.get(a.ping.remote(rounds, direct))
        ray.get(done)
        out[label] = times[rounds // 10 :]  # drop warm-up
    for handle in (a, b):
        ray.kill(handle)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=65536, help="env steps per layout")
    parser.add_argument("--rounds", type=int, default=2000, help="round trips for the transport measurement")
    parser.add_argument("--only", nargs="*", choices=sorted(LAYOUTS), help="layouts to run (default: all)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per layout, interleaved; the table shows the median run (by env steps/s)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in args.only or LAYOUTS}
    with tempfile.TemporaryDirectory() as runs_dir:
        # Interleaved rounds, so a slow spell of a shared machine hits every layout alike.
        for round_ in range(args.repeats):
            for name in runs:
                print(f"running {name} ({round_ + 1}/{args.repeats}) ...", file=sys.stderr)
                runs[name].append(run_layout(LAYOUTS[name], args.budget, runs_dir))
    rows = {name: sorted(found, key=lambda row: row["steps_per_s"])[len(found) // 2] for name, found in runs.items()}
    base = rows.get("local", {}).get("steps_per_s")
    print(
        f"\n{platform.node()}: {os.cpu_count()} CPUs, torch {torch.__version__}, budget {args.budget:,} env steps, "
        f"median of {args.repeats} interleaved runs per layout\n"
    )
    print("| layout | env steps/s | vs local | " + " | ".join(PHASES) + " |")
    print("|---|---|---|" + "---|" * len(PHASES))
    for name, row in rows.items():
        ratio = f"{row['steps_per_s'] / base:.2f}x" if base else "-"
        shares = " | ".join(f"{row[p]:.0%}" for p in PHASES)
        print(f"| {name} | {row['steps_per_s']:,.0f} | {ratio} | {shares} |")
    print(
        "\nPhase columns: share of wall time (slowest replica per fragment, summed over fragments,"
        " so they may exceed 100%)."
    )
    trips = round_trip(args.rounds)
    print("\n| per-step transport (obs 32x4 float32 up, 32 actions down) | median | p90 |")
    print("|---|---|---|")
    for label, times in trips.items():
        ordered = sorted(times)
        print(
            f"| {label} | {statistics.median(ordered) * 1e6:,.0f} µs "
            f"| {ordered[int(len(ordered) * 0.9)] * 1e6:,.0f} µs |"
        )


if __name__ == "__main__":
    main()
