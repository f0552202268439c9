"""How fast is prioritized replay?  Transitions per second through ``msrl.rl.PrioritizedReplayBuffer``
on one core: sampling a batch (stratified draws down the sum tree, gathering the transitions and
their importance weights) and updating the sampled rows' priorities, against the same batch from
the uniform ``ReplayBuffer``.  The buffer is full (``--capacity`` transitions of CartPole-sized
observations) and every size is one ``sample()`` call's rows (``batch_size x num_batches``: DQN
CartPole's shipped config samples 64 x 128 = 8,192 a call).

    python -m benchmarks.replay_speed --capacity 1000000 --rows 256 8192 65536
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks.harness import command_line, machine_info, markdown_table, timed
from msrl.rl import PrioritizedReplayBuffer, ReplayBuffer


def _filled(kind: type[ReplayBuffer], capacity: int, rows: int) -> ReplayBuffer:
    buffer = kind(capacity, (4,), batch_size=rows, seed=0)
    chunk = 100_000
    for start in range(0, capacity, chunk):
        count = min(chunk, capacity - start)
        obs = torch.randn(count, 4)
        zeros = torch.zeros(count)
        buffer.insert(obs, torch.zeros(count, dtype=torch.int64), zeros, obs, zeros, zeros)
    return buffer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, nargs="+", default=[256, 8192, 65536])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"command: {command_line('benchmarks.replay_speed', argv)}")
    print(f"machine: {machine_info(('torch',), note='1 torch thread')}\n")
    table = []
    for rows in args.rows:
        uniform = _filled(ReplayBuffer, args.capacity, rows)
        prioritized = _filled(PrioritizedReplayBuffer, args.capacity, rows)
        assert isinstance(prioritized, PrioritizedReplayBuffer)
        errors = torch.rand(rows, 1)

        def cycle(buffer: PrioritizedReplayBuffer = prioritized, errors: torch.Tensor = errors) -> None:
            buffer.sample()
            buffer.update_priorities(errors)

        seconds = {
            "uniform sample": statistics.median(timed(uniform.sample, args.rounds)),
            "prioritized sample": statistics.median(timed(prioritized.sample, args.rounds)),
            "prioritized sample + update": statistics.median(timed(cycle, args.rounds)),
        }
        table.append([f"{rows:,}", *(f"{rows / s / 1e6:.2f}M" for s in seconds.values())])
    print(markdown_table(["rows a call", "uniform sample", "prioritized sample", "prioritized sample + update"], table))
    print(f"\ntransitions per second, median of {args.rounds} calls, buffer of {args.capacity:,}")


if __name__ == "__main__":
    main()
