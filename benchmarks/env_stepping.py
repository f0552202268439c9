"""How fast do msrl's environments step?  Environment steps per second for every backend across
batch sizes, next to gymnasium's own ``SyncVectorEnv`` as the baseline and EnvPool, printed as a
markdown table (WarpDrive's CUDA CartPole on the same GPU: ``benchmarks.warpdrive --sections cartpole``).

Rows: gymnasium SyncVectorEnv (small batches only: it steps envs one by one),
the same through msrl's gymnasium adapter (what any gymnasium id runs on),
msrl's NumPy backend, the NumPy backend sharded over a 2-thread pool (what the
``cpu`` executor does with 2 CPUs), the torch backend on CPU, the CUDA C kernels
compiled natively for the CPU (``cpu-kernel``, float64 on 1 and ``--threads``
OpenMP threads, float32 on 1), EnvPool beside them where it is installed, and,
where a GPU and pycuda exist, the torch backend on CUDA and the CUDA C kernels.
The kernel rows time the public ``env.step`` twice: with the episode bookkeeping
in the step kernel (one launch per step, the default) and with it left to the
host's array ops after the launch (``fuse_episodes=False``); ``cuda-emulated``
runs both on the CPU emulation (small sizes: a check that the path runs).
A second table gives each row's ratio to msrl's NumPy backend.

    python -m benchmarks.env_stepping --env CartPole-v1 --sizes 16 1024 65536
    python -m benchmarks.env_stepping --sizes 64 4096 --rows numpy,cpu-kernel,envpool
    python -m benchmarks.env_stepping --rows cuda --sizes 65536 1048576 16777216   # on a GPU
    python -m benchmarks.env_stepping --rows cuda-emulated --sizes 64 1024
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
import torch

import msrl
import msrl.envs
from benchmarks.harness import command_line, machine_info, rate, table_head, table_row

DEFAULT_SIZES = (16, 256, 1024, 4096, 16384, 65536)
ROWS = ("gymnasium", "numpy", "sharded", "torch", "cpu-kernel", "envpool", "cuda", "cuda-emulated")
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


def measure_msrl(env_id: str, backend: str, num_envs: int, seconds: float, **kwargs) -> float:
    env = msrl.envs.make(env_id, num_envs, seed=0, backend=backend, **kwargs)
    try:
        env.reset()
        actions = random_actions(env, np.random.default_rng(0), 20)
        device = kwargs.get("device", "cuda" if backend == "cuda" else "cpu")  # actions where the env is
        if backend in ("torch", "cuda"):
            actions = [torch.as_tensor(a, device=device) for a in actions]
        sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
        return rate(env.step, actions, num_envs, seconds, sync)
    finally:
        env.close()


def measure_sharded(env_id: str, num_envs: int, threads: int, seconds: float) -> float:
    env = msrl.envs.ShardedEnv(
        lambda n, seed: msrl.envs.make(env_id, n, seed=seed, backend="numpy"), num_envs, 0, threads
    )
    try:
        env.reset()
        actions = random_actions(env, np.random.default_rng(0), 20)
        return rate(env.step, actions, num_envs, seconds, lambda: None)
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
    steps_per_s = rate(envs.step, actions, num_envs, seconds)
    envs.close()
    return steps_per_s


def measure_envpool(env_id: str, num_envs: int, threads: int, seconds: float) -> float:
    """EnvPool's synchronous mode (batch_size = num_envs) on ``threads`` threads."""
    import envpool

    envs = envpool.make_gymnasium(env_id, num_envs=num_envs, batch_size=num_envs, num_threads=threads, seed=0)
    envs.reset()
    rng = np.random.default_rng(0)
    space = envs.action_space
    if hasattr(space, "n"):
        actions = [rng.integers(0, space.n, size=num_envs).astype(np.int32) for _ in range(20)]
    else:
        actions = [rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(np.float32) for _ in range(20)]
    steps_per_s = rate(envs.step, actions, num_envs, seconds)
    envs.close()
    return steps_per_s


def native_rows(env_id: str, sizes: Sequence[int], seconds: float, threads: int) -> list[tuple[str, dict[int, float]]]:
    """The cpu-kernel backend: float64 (bit-identical to NumPy) on 1 and ``threads`` threads, float32 on 1."""
    table: list[tuple[str, dict[int, float]]] = []
    for dtype, count in dict.fromkeys(((np.float64, 1), (np.float64, threads), (np.float32, 1))):
        name = f"msrl cpu-kernel ({np.dtype(dtype).name}, {count} thread{'s' if count > 1 else ''})"
        table.append(
            (name, {n: measure_msrl(env_id, "cpu-kernel", n, seconds, dtype=dtype, threads=count) for n in sizes})
        )
    return table


def envpool_rows(env_id: str, sizes: Sequence[int], seconds: float, threads: int) -> list[tuple[str, dict[int, float]]]:
    try:
        import envpool  # noqa: F401
    except ImportError:
        print("envpool is not installed (pip install 'msrl[bench]'): no EnvPool rows", file=sys.stderr)
        return []
    counts = sorted({1, threads})
    return [
        (
            f"EnvPool ({count} thread{'s' if count > 1 else ''})",
            {n: measure_envpool(env_id, n, count, seconds) for n in sizes},
        )
        for count in counts
    ]


def rows(
    env_id: str, sizes: Sequence[int], seconds: float, threads: int, which: Sequence[str] = ROWS
) -> list[tuple[str, dict[int, float]]]:
    table: list[tuple[str, dict[int, float]]] = []
    if "gymnasium" in which:
        table += gymnasium_rows(env_id, sizes, seconds)
    torch.set_num_threads(1)
    if "numpy" in which:
        table.append(("msrl numpy", {n: measure_msrl(env_id, "numpy", n, seconds) for n in sizes}))
    if "sharded" in which:
        table.append(
            (
                f"msrl numpy, {threads} shards (cpu executor)",
                {n: measure_sharded(env_id, n, threads, seconds) for n in sizes if n >= threads},
            )
        )
    if "torch" in which:
        table.append(("msrl torch (cpu, 1 thread)", {n: measure_msrl(env_id, "torch", n, seconds) for n in sizes}))
    if "cpu-kernel" in which:
        table += native_rows(env_id, sizes, seconds, threads)
    if "envpool" in which:
        table += envpool_rows(env_id, sizes, seconds, threads)
    if "cuda" in which and torch.cuda.is_available():
        table += gpu_rows(env_id, sizes, seconds)
    if "cuda-emulated" in which:
        table += kernel_rows(env_id, "cuda-emulated", "cuda kernels on the CPU emulation", sizes, seconds)
    return table


def kernel_rows(env_id: str, backend: str, name: str, sizes: Sequence[int], seconds: float) -> list:
    """``backend``'s ``env.step`` with the episode bookkeeping fused into the step kernel, and
    without (the tracker's array ops after the launch)."""
    where = {"device": "cuda"} if backend == "cuda" else {}  # make() builds on the CPU unless told
    return [
        (
            f"msrl {name}{label}",
            {n: measure_msrl(env_id, backend, n, seconds, fuse_episodes=fuse, **where) for n in sizes},
        )
        for fuse, label in ((True, ""), (False, ", bookkeeping on the host"))
    ]


def gymnasium_rows(env_id: str, sizes: Sequence[int], seconds: float) -> list[tuple[str, dict[int, float]]]:
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
    return table


def gpu_rows(env_id: str, sizes: Sequence[int], seconds: float) -> list[tuple[str, dict[int, float]]]:
    name = torch.cuda.get_device_name()
    table = [(f"msrl torch ({name})", {n: measure_msrl(env_id, "torch", n, seconds, device="cuda") for n in sizes})]
    try:
        import fragments.cuda  # noqa: F401  registers the cuda backend

        table += kernel_rows(env_id, "cuda", f"cuda kernels ({name})", sizes, seconds)
    except Exception as exc:  # pycuda missing: say why, keep the other rows
        print(f"no cuda-kernel row: {exc}", file=sys.stderr)
    return table


def markdown(
    table: list[tuple[str, dict[int, float]]], sizes: Sequence[int], baseline: str = "gymnasium SyncVectorEnv"
) -> str:
    base = dict(table).get(baseline, {})
    lines = [table_head(["backend", *(f"{n:,} envs" for n in sizes)])]
    for name, rates in table:
        cells = []
        for n in sizes:
            if n not in rates:
                cells.append("–")
                continue
            ratio = (
                f" ({rates[n] / base[n]:.{0 if rates[n] >= 10 * base[n] else 1}f}x)"
                if n in base and name != baseline
                else ""
            )
            cells.append(f"{rates[n] / 1e6:.2f}M{ratio}")
        lines.append(table_row([name, *cells]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1", choices=["CartPole-v1", "Pendulum-v1"])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--seconds", type=float, default=0.5, help="measuring time per cell (median of windows)")
    parser.add_argument(
        "--threads", type=int, default=2, help="shards/threads for the cpu-executor, cpu-kernel and EnvPool rows"
    )
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    parser.add_argument("--rounds", type=int, default=1, help="measure every row this often; cells are medians")
    args = parser.parse_args(argv)
    which = [r for r in args.rows.split(",") if r]
    if min(*args.sizes, args.threads, args.rounds) < 1 or args.seconds <= 0 or not set(which) <= set(ROWS):
        parser.error(f"sizes, threads and rounds must be >= 1, seconds > 0, rows among {', '.join(ROWS)}")
    # Rounds interleave the rows, so load that comes and goes (other jobs) reaches every row alike.
    rounds = [rows(args.env, args.sizes, args.seconds, args.threads, which) for _ in range(args.rounds)]
    table = [
        (name, {n: float(np.median([r[i][1][n] for r in rounds])) for n in rates})
        for i, (name, rates) in enumerate(rounds[0])
    ]
    print(
        f"{args.env}: env steps/s (M = million), ratio to gymnasium SyncVectorEnv in brackets; random actions; "
        f"median of {args.rounds} interleaved round(s)\n"
    )
    print(markdown(table, args.sizes))
    if "numpy" in which:
        print("\nThe same, ratio to msrl's NumPy backend; per step at the smallest size: ", end="")
        print(
            ", ".join(
                f"{name} {args.sizes[0] / r[args.sizes[0]] * 1e6:.1f} us" for name, r in table if args.sizes[0] in r
            )
        )
        print()
        print(markdown(table, args.sizes, baseline="msrl numpy"))
    command = command_line("benchmarks.env_stepping", argv)
    print(f"\n`{command}` -- {machine_info(('torch', 'numpy', 'gymnasium', 'envpool'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
