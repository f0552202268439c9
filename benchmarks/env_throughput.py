"""Environment steps per second for every backend across batch sizes, next to
gymnasium's own ``SyncVectorEnv`` as the baseline, printed as a markdown table.

Rows: gymnasium SyncVectorEnv (small batches only: it steps envs one by one),
the same through msrl's gymnasium adapter (what any gymnasium id runs on),
msrl's NumPy backend, the NumPy backend sharded over a 2-thread pool (what the
``cpu`` executor does with 2 CPUs), the torch backend on CPU, and, where a GPU
and pycuda exist, the torch backend on CUDA and the CUDA C kernels.

    python benchmarks/env_throughput.py --env CartPole-v1 --sizes 16 1024 65536
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

import msrl
import msrl.envs

DEFAULT_SIZES = (16, 256, 1024, 4096, 16384, 65536)
GYM_MAX_ENVS = 4096  # SyncVectorEnv at 65k envs takes minutes per measurement


def random_actions(env: msrl.Environment, rng: np.random.Generator, count: int) -> list:
    """Pre-drawn actions, so drawing them is not timed."""
    space = env.action_space
    if isinstance(space, msrl.Discrete):
        return [rng.integers(0, space.n, size=env.num_envs) for _ in range(count)]
    return [
        rng.uniform(space.low, space.high, size=(env.num_envs,) + tuple(space.shape)).astype(np.float32)
        for _ in range(count)
    ]


def steps_per_second(
    step: Callable[[object], object], actions: list, num_envs: int, seconds: float, sync: Callable[[], None]
) -> float:
    """Median rate over repeated timed windows of ``len(actions)`` steps."""
    for action in actions[:3]:
        step(action)
    sync()
    rates = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rates) < 3:
        start = time.perf_counter()
        for action in actions:
            step(action)
        sync()
        rates.append(len(actions) * num_envs / (time.perf_counter() - start))
    return float(np.median(rates))


def measure_msrl(env_id: str, backend: str, num_envs: int, seconds: float, **kwargs) -> float:
    env = msrl.envs.make(env_id, num_envs, seed=0, backend=backend, **kwargs)
    try:
        env.reset()
        actions = random_actions(env, np.random.default_rng(0), 20)
        device = kwargs.get("device", "cpu")
        if backend in ("torch", "cuda"):
            actions = [torch.as_tensor(a, device=device) for a in actions]
        sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
        return steps_per_second(env.step, actions, num_envs, seconds, sync)
    finally:
        env.close()


def measure_sharded(env_id: str, num_envs: int, threads: int, seconds: float) -> float:
    env = msrl.envs.ShardedEnv(
        lambda n, seed: msrl.envs.make(env_id, n, seed=seed, backend="numpy"), num_envs, 0, threads
    )
    try:
        env.reset()
        actions = random_actions(env, np.random.default_rng(0), 20)
        return steps_per_second(env.step, actions, num_envs, seconds, lambda: None)
    finally:
        env.close()


def measure_gymnasium(env_id: str, num_envs: int, seconds: float) -> float:
    import gymnasium

    envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(env_id) for _ in range(num_envs)])
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    if isinstance(envs.single_action_space, gymnasium.spaces.Discrete):
        actions = [rng.integers(0, envs.single_action_space.n, size=num_envs) for _ in range(10)]
    else:
        low, high = envs.single_action_space.low, envs.single_action_space.high
        actions = [rng.uniform(low, high, size=(num_envs,) + low.shape).astype(np.float32) for _ in range(10)]
    rate = steps_per_second(envs.step, actions, num_envs, seconds, lambda: None)
    envs.close()
    return rate


def rows(env_id: str, sizes: Sequence[int], seconds: float, threads: int) -> list[tuple[str, dict[int, float]]]:
    table: list[tuple[str, dict[int, float]]] = []
    try:
        table.append(
            ("gymnasium SyncVectorEnv", {n: measure_gymnasium(env_id, n, seconds) for n in sizes if n <= GYM_MAX_ENVS})
        )
        table.append(
            (
                "msrl gymnasium adapter",
                {n: measure_msrl(env_id, "gymnasium", n, seconds) for n in sizes if n <= GYM_MAX_ENVS},
            )
        )
    except ImportError:
        print("gymnasium not installed: no baseline row", file=sys.stderr)
    torch.set_num_threads(1)
    table.append(("msrl numpy", {n: measure_msrl(env_id, "numpy", n, seconds) for n in sizes}))
    table.append(
        (
            f"msrl numpy, {threads} shards (cpu executor)",
            {n: measure_sharded(env_id, n, threads, seconds) for n in sizes if n >= threads},
        )
    )
    table.append(("msrl torch (cpu, 1 thread)", {n: measure_msrl(env_id, "torch", n, seconds) for n in sizes}))
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        table.append(
            (f"msrl torch ({name})", {n: measure_msrl(env_id, "torch", n, seconds, device="cuda") for n in sizes})
        )
        try:
            import fragments.cuda  # noqa: F401  registers the cuda backend

            table.append((f"msrl cuda kernels ({name})", {n: measure_msrl(env_id, "cuda", n, seconds) for n in sizes}))
        except Exception as exc:  # pycuda missing: say why, keep the other rows
            print(f"no cuda-kernel row: {exc}", file=sys.stderr)
    return table


def markdown(
    table: list[tuple[str, dict[int, float]]], sizes: Sequence[int], baseline: str = "gymnasium SyncVectorEnv"
) -> str:
    base = dict(table).get(baseline, {})
    lines = ["| backend | " + " | ".join(f"{n:,} envs" for n in sizes) + " |", "|---|" + "---:|" * len(sizes)]
    for name, rates in table:
        cells = []
        for n in sizes:
            if n not in rates:
                cells.append("–")
                continue
            ratio = f" ({rates[n] / base[n]:.0f}x)" if n in base and name != baseline else ""
            cells.append(f"{rates[n] / 1e6:.2f}M{ratio}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1", choices=["CartPole-v1", "Pendulum-v1"])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--seconds", type=float, default=0.5, help="measuring time per cell (median of windows)")
    parser.add_argument("--threads", type=int, default=2, help="shards/threads for the cpu-executor row")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.sizes) or args.seconds <= 0 or args.threads < 1:
        parser.error("sizes and threads must be >= 1 and seconds > 0")
    table = rows(args.env, args.sizes, args.seconds, args.threads)
    print(f"{args.env}: env steps/s (M = million), ratio to gymnasium SyncVectorEnv in brackets; random actions\n")
    print(markdown(table, args.sizes))
    print(
        f"\n`{shlex.join(['python', *sys.argv])}` -- {platform.platform()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, numpy {np.__version__}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
