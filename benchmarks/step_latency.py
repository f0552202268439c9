"""What does the compiled step cost per call?  An actor's ``act``, eager against compiled
(``algo.compile: true`` on the CPU), for the
actors of the shipped configs at their shapes: PPO CartPole's ActorCritic (64 rows), A2C
CartPole's ActorCritic (8 rows), DQN CartPole's epsilon-greedy Q-network (10 rows) and SAC
Pendulum's squashed Gaussian policy (1 row).  Both actors of a row run in this process, in
alternating blocks (this VM's speed drifts), on torch's one thread as the ``local`` policy sets it.

    python -m benchmarks.step_latency [--calls 3000] [--blocks 5]

prints a markdown table: microseconds per call (median over blocks) and compiled/eager.  The
first compiled call builds or loads the region (built once per machine, then cached); it is
timed apart and not in the per-call figure.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import torch

from algorithms.a2c import A2CConfig
from algorithms.dqn import DQNActor, DQNConfig
from algorithms.ppo import PPOConfig, network
from algorithms.sac import SACActor, SACConfig
from benchmarks.harness import interleave, per_call, table_head, table_row
from msrl.core import Box, Discrete, RunInfo
from msrl.rl import ActorCritic, ActorCriticActor


def actors(compile: bool) -> dict[str, tuple[Any, torch.Tensor]]:
    """Each row's actor, eager or compiled, and an observation batch of its shape."""
    run, g = RunInfo(seed=1, total_env_steps=100_000), torch.Generator().manual_seed(0)
    mode = "true" if compile else "false"
    ppo = PPOConfig()
    a2c = A2CConfig()
    dqn = DQNConfig(hidden_sizes=(120, 84), compile=compile)
    sac = SACConfig(hidden_sizes=(256, 256), learning_starts=0, compile=compile)
    return {
        "PPO CartPole (ActorCritic 64-64, 64 rows)": (
            ActorCriticActor(network(4, Discrete(2), ppo, 1), 7, compile=mode),
            torch.randn(64, 4, generator=g),
        ),
        "A2C CartPole (ActorCritic 64-64, 8 rows)": (
            ActorCriticActor(ActorCritic(4, Discrete(2), a2c.hidden_size, 1), 7, compile=mode),
            torch.randn(8, 4, generator=g),
        ),
        "DQN CartPole (Q 120-84, 10 rows)": (DQNActor(4, 2, dqn, run), torch.randn(10, 4, generator=g)),
        "SAC Pendulum (policy 256-256, 1 row)": (
            SACActor(3, Box(-2.0, 2.0, (1,)), sac, run),
            torch.randn(1, 3, generator=g),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per timed block")
    parser.add_argument("--blocks", type=int, default=5, help="alternating blocks per actor")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    eager, compiled = actors(False), actors(True)
    print(table_head(["actor", "eager us/call", "compiled us/call", "compiled/eager", "first compiled call s"]))
    for name, (actor, obs) in eager.items():
        other = compiled[name][0]
        start = time.perf_counter()
        other.act(obs)  # builds or loads the region
        first = time.perf_counter() - start
        times = interleave(
            {
                "eager": lambda actor=actor, obs=obs: per_call(lambda: actor.act(obs), args.calls),
                "compiled": lambda other=other, obs=obs: per_call(lambda: other.act(obs), args.calls),
            },
            args.blocks,
        )
        e, c = (statistics.median(times[kind]) * 1e6 for kind in ("eager", "compiled"))
        print(table_row([name, f"{e:.1f}", f"{c:.1f}", f"{c / e:.2f}", f"{first:.2f}"]), flush=True)


if __name__ == "__main__":
    main()
