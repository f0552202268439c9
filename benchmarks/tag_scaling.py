"""How does Tag scale?  Tag-v0 steps per second as environments and agents grow, next to a per-agent
Python loop (WarpDrive's TagContinuous on the same GPU: ``benchmarks.warpdrive --sections tag``).

Rows: each backend asked for (NumPy and torch on the CPU by default; ``cpu-kernel``: the CUDA
kernels compiled natively, float64, on ``--kernel-threads`` threads; ``--backends cuda`` and
``--backends torch --device cuda`` on a GPU) at environments 1 ... 2,000 x agents 10 ... 1,000,
every agent observing its 8 nearest, and up to 100 agents also all others (``num_observed=0``:
5 (N-1) numbers per agent); a size whose first step takes longer than ``--max-step-seconds`` is
listed as not run.  Beside them, the same rules written one agent at a time in Python, the way a
PettingZoo parallel environment steps (dicts keyed by agent name, one NumPy observation per
agent, environments stepped one after another).  A fifth of the agents are taggers.  Actions are
uniformly random and drawn before timing; finished episodes restart inside the timed steps, as in
training.  Last, end-to-end IPPO training (``configs/ippo_tag.yaml``, local policy) at three sizes.

    python -m benchmarks.tag_scaling --threads 1          # CPU rows, two seconds each
    python -m benchmarks.tag_scaling --quick --training-steps 0
    python -m benchmarks.tag_scaling --backends cuda,torch --device cuda   # on a GPU
    python -m benchmarks.tag_scaling --backends numpy,cpu-kernel --sizes 1000x10 100x100 --training-steps 0
"""

from __future__ import annotations

import argparse
import math
import random
import time
from typing import Any

import numpy as np
import torch

import msrl.envs
from benchmarks.harness import REPO, machine_info, rate, table_head
from msrl.envs.tag import Tag

ENVS = (1, 10, 100, 1000, 2000)
AGENTS = (10, 100, 1000)
LOOP_SIZES = ((1, 10), (10, 10), (10, 100), (100, 100))
OBSERVED = (0, 8)
ALL_OTHERS_UP_TO = 100
"""Agents per environment up to which the all-others observation (``num_observed=0``, 5 (N-1)
numbers per agent) is measured too; beyond it only the 8 nearest are (what a large game uses)."""
TRAINING = ((64, 10), (16, 100), (4, 1000))
"""(envs, agents) of the end-to-end IPPO rows."""


class PerAgentTag:
    """One Tag environment stepped one agent at a time in Python, PettingZoo-style: ``step({agent:
    action})`` returns dicts of observations (float32 arrays), rewards, terminations and truncations.
    Same rules and constants as ``env`` (a ``Tag``, read for its constants only)."""

    def __init__(self, env: Tag, seed: int) -> None:
        self.c = env
        T, N = env.num_taggers, env.num_agents
        self.agents = [f"tagger_{i}" for i in range(T)] + [f"runner_{i}" for i in range(N - T)]
        self.top = [env.tagger_max_speed] * T + [env.runner_max_speed] * (N - T)
        accelerations, turns = env.action_tables()
        self.moves = list(zip(accelerations.tolist(), turns.tolist()))
        self.rng = random.Random(seed)
        self.reset()

    def reset(self) -> dict[str, np.ndarray]:
        N, W = len(self.agents), self.c.world_size
        self.x = [self.rng.uniform(0, W) for _ in range(N)]
        self.y = [self.rng.uniform(0, W) for _ in range(N)]
        self.speed = [0.0] * N
        self.heading = [self.rng.uniform(0, 2 * math.pi) for _ in range(N)]
        self.active = [True] * N
        self.t = 0
        return self.observe()

    def step(self, actions: dict[str, int]) -> tuple[dict, dict, dict, dict]:
        c, T, N, W = self.c, self.c.num_taggers, len(self.agents), self.c.world_size
        rewards = dict.fromkeys(self.agents, 0.0)
        was_active = list(self.active)
        for i, agent in enumerate(self.agents):
            if not was_active[i]:
                continue
            acceleration, turn = self.moves[actions[agent]]
            heading = self.heading[i] + turn
            self.heading[i] = heading = heading - 2 * math.pi * math.floor(heading / (2 * math.pi))
            self.speed[i] = speed = min(max(self.speed[i] + acceleration, 0.0), self.top[i])
            x, y = self.x[i] + speed * math.cos(heading), self.y[i] + speed * math.sin(heading)
            self.x[i], self.y[i] = min(max(x, 0.0), W), min(max(y, 0.0), W)
            reward = c.edge_hit_penalty if (self.x[i] != x or self.y[i] != y) else 0.0
            rewards[agent] = reward + (c.step_penalty_for_tagger if i < T else c.step_reward_for_runner)
        reach2 = c.tagging_distance * c.tagging_distance
        for r in range(T, N):
            if not was_active[r]:
                continue
            tagged = False
            for k in range(T):
                if was_active[k] and (self.x[r] - self.x[k]) ** 2 + (self.y[r] - self.y[k]) ** 2 <= reach2:
                    rewards[self.agents[k]] += c.tag_reward_for_tagger
                    tagged = True
            if tagged:
                rewards[self.agents[r]] += c.tag_penalty_for_runner
                self.active[r] = self.active[r] and not c.runner_exits_game_after_tagged
        self.t += 1
        for r in range(T, N):
            if self.active[r] and self.t == c.max_episode_steps:
                rewards[self.agents[r]] += c.end_of_game_reward_for_runner
        done = not any(self.active[T:])
        truncated = self.t == c.max_episode_steps
        obs = self.reset() if done or truncated else self.observe()
        return obs, rewards, dict.fromkeys(self.agents, done), dict.fromkeys(self.agents, truncated)

    def observe(self) -> dict[str, np.ndarray]:
        c, T, N, W, M = self.c, self.c.num_taggers, len(self.agents), self.c.world_size, self.c.observed
        out = {}
        for i, agent in enumerate(self.agents):
            features = [
                self.x[i] / W,
                self.y[i] / W,
                self.speed[i] / self.top[i],
                math.cos(self.heading[i]),
                math.sin(self.heading[i]),
                float(self.active[i]),
                self.t / c.max_episode_steps,
            ]
            others = [j for j in range(N) if j != i]
            if M < N - 1:

                def key(j: int, i: int = i) -> tuple[float, int]:
                    d = (self.x[j] - self.x[i]) ** 2 + (self.y[j] - self.y[i]) ** 2
                    return (d if self.active[j] else math.inf), j

                others = sorted(others, key=key)[:M]
            for j in others:
                features += [
                    (self.x[j] - self.x[i]) / W,
                    (self.y[j] - self.y[i]) / W,
                    self.speed[j] / self.top[j],
                    float(j < T),
                    float(self.active[j]),
                ]
            out[agent] = np.array(features, dtype=np.float32)
        return out


def tag_kwargs(agents: int, observed: int) -> dict[str, int]:
    taggers = max(1, agents // 5)
    return {"num_taggers": taggers, "num_runners": agents - taggers, "num_observed": observed}


def measure_msrl(
    backend: str,
    envs: int,
    agents: int,
    observed: int,
    seconds: float,
    max_step: float,
    device: str | None = None,
    **options: Any,
) -> float | None:
    """Env steps/s of ``backend``, or None when one step takes longer than ``max_step`` seconds."""
    if device:
        options["device"] = device
    env = msrl.envs.make("Tag-v0", num_envs=envs, seed=0, backend=backend, **tag_kwargs(agents, observed), **options)
    rng = np.random.default_rng(0)
    n = env.groups["taggers"].action_space.n
    actions = [{g: rng.integers(0, n, (envs, group.num_agents)) for g, group in env.groups.items()} for _ in range(50)]
    if backend in ("torch", "cuda"):
        actions = [{g: torch.as_tensor(a, device=env.device) for g, a in action.items()} for action in actions]
    sync = torch.cuda.synchronize if str(env.device).startswith("cuda") else (lambda: None)
    start = time.perf_counter()
    env.step(actions[0])
    sync()
    if time.perf_counter() - start > max_step:
        return None

    def step(action: Any) -> None:
        env.step(action)

    result = rate(step, actions, envs, seconds, sync)
    env.close()
    return result


def measure_training(envs: int, agents: int, steps: int) -> tuple[float, float]:
    """End to end: IPPO on Tag (8 nearest observed) under the local policy; env steps/s and the
    share of the time spent stepping the environment."""
    import tempfile

    import msrl

    with tempfile.TemporaryDirectory() as runs:
        kwargs = tag_kwargs(agents, 8)
        overrides = [
            f"runs_dir={runs}",
            "progress=false",
            "eval_episodes=0",
            "checkpoint_every=0",
            f"algo.num_envs={envs}",
            "algo.num_steps=25",
            "algo.update_epochs=1",
            "algo.num_minibatches=1",
            f"total_env_steps={steps}",
            *(f"algo.env_kwargs.{k}={v}" for k, v in kwargs.items()),
        ]
        run = msrl.train(str(REPO / "configs" / "ippo_tag.yaml"), overrides)
    later = run.metrics[1:]  # the first iteration pays for warm-up
    steps_done = sum(b["env_steps"] - a["env_steps"] for a, b in zip(run.metrics, later))
    wall = sum(r["wall_time"] for r in later)
    return steps_done / wall, sum(r.get("time_env", 0.0) for r in later) / wall


def measure_loop(envs: int, agents: int, observed: int, seconds: float) -> float:
    constants = Tag(1, **tag_kwargs(agents, observed))
    batch = [PerAgentTag(constants, seed) for seed in range(envs)]
    rng = np.random.default_rng(0)
    n = constants.groups["taggers"].action_space.n
    actions = [
        [{agent: int(a) for agent, a in zip(env.agents, rng.integers(0, n, agents))} for env in batch]
        for _ in range(50)
    ]

    def step(per_env: list[dict[str, int]]) -> None:
        for env, action in zip(batch, per_env):
            env.step(action)

    return rate(step, actions, envs, seconds)


def measure_cells(
    cells: list[tuple[str, int, int, int]], args: argparse.Namespace, seconds: float
) -> dict[tuple[str, int, int, int], float | None]:
    """Env steps/s per (backend or "loop", envs, agents, num_observed): the median of ``args.rounds``
    measurements, every cell once per round, so that load which comes and goes (other jobs on the
    machine) reaches every row alike; None where one step took longer than ``--max-step-seconds``."""
    samples: dict[tuple[str, int, int, int], list[float | None]] = {cell: [] for cell in cells}
    for _ in range(args.rounds):
        for backend, envs, agents, observed in cells:
            if None in samples[backend, envs, agents, observed]:
                continue  # too slow once: not run again
            if backend == "loop":
                measured: float | None = measure_loop(envs, agents, observed, seconds)
            else:
                options: dict[str, Any] = {}
                if backend == "cpu-kernel":
                    options = {"dtype": np.float64, "threads": args.kernel_threads}
                device = args.device if backend == "torch" else None
                measured = measure_msrl(
                    backend, envs, agents, observed, seconds, args.max_step_seconds, device, **options
                )
            samples[backend, envs, agents, observed].append(measured)
    return {
        cell: None if None in values else float(np.median([v for v in values if v is not None]))
        for cell, values in samples.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fraction of a second per row")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch's intra-op threads (default: torch's own choice); 1 on a machine shared with "
        "other jobs, where threads that wait for each other cost more than they share",
    )
    parser.add_argument(
        "--backends",
        default="numpy,torch",
        help="comma-separated: numpy, torch (on --device), cpu-kernel (native CPU build of the CUDA kernels), "
        "cuda (pycuda kernels; needs a GPU)",
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=None,
        metavar="ENVSxAGENTS",
        help="only these sizes, for the loop and every backend (e.g. 1000x10 100x100)",
    )
    parser.add_argument("--kernel-threads", type=int, default=1, help="OpenMP threads of the cpu-kernel rows")
    parser.add_argument("--rounds", type=int, default=1, help="measure every row this often, interleaved; medians")
    parser.add_argument("--device", default=None, help="torch backend's device (default cpu; cuda for the GPU rows)")
    parser.add_argument(
        "--max-step-seconds", type=float, default=5.0, help="skip a size whose first step takes longer (default 5 s)"
    )
    parser.add_argument(
        "--training-steps",
        type=int,
        default=20000,
        help="env steps of the end-to-end IPPO row with 10 agents; the others take as many agent "
        "steps (0: no training rows)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    seconds = 0.3 if args.quick else 2.0
    backends = [b for b in args.backends.split(",") if b]
    chosen = [tuple(int(v) for v in size.split("x")) for size in args.sizes] if args.sizes else None
    # The loop only where it is its own defaults' size or smaller: building 2,000 x 1,000 agents as
    # Python objects took longer than the GPU rows' whole time budget on an H200's host.
    largest = max(e * a for e, a in LOOP_SIZES)
    loop_sizes = [(e, a) for e, a in chosen if e * a <= largest] if chosen else list(LOOP_SIZES)
    sizes = chosen or [(envs, agents) for agents in AGENTS for envs in ENVS]

    print(f"# Tag-v0 env steps/s ({machine_info(('torch', 'numpy'), f'torch on {torch.get_num_threads()} threads')})\n")
    print(
        table_head(["backend", "envs", "agents", "num_observed", "env steps/s", "agent steps/s", "vs per-agent loop"])
    )
    labels = {
        "numpy": "NumPy",
        "torch": f"torch {args.device or 'cpu'} f32",
        "cpu-kernel": f"cpu-kernel f64, {args.kernel_threads} thread(s)",
        "cuda": "CUDA C kernels",
    }
    cells: list[tuple[str, int, int, int]] = [("loop", e, a, o) for e, a in loop_sizes for o in OBSERVED]
    cells += [(b, e, a, o) for b in backends for e, a in sizes for o in OBSERVED if o or a <= ALL_OTHERS_UP_TO]
    rates = measure_cells(cells, args, seconds)
    for (backend, envs, agents, observed), per_s in rates.items():
        label = "per-agent Python loop" if backend == "loop" else labels[backend]
        if per_s is None:
            print(f"| {label} | {envs} | {agents} | {observed} | one step > {args.max_step_seconds:g} s: not run | | |")
            continue
        base, vs_numpy = rates.get(("loop", envs, agents, observed)), rates.get(("numpy", envs, agents, observed))
        ratio = f"{per_s / base:.1f}x" if base else ""
        if vs_numpy and backend not in ("numpy", "loop"):
            ratio += f" ({per_s / vs_numpy:.1f}x NumPy)"
        print(f"| {label} | {envs} | {agents} | {observed} | {per_s:,.0f} | {per_s * agents:,.0f} | {ratio} |")
    if args.training_steps:
        print(
            "\n"
            + table_head(
                [
                    "end to end: IPPO, local policy",
                    "envs",
                    "agents",
                    "env steps/s",
                    "agent steps/s",
                    "env share of time",
                ]
            )
        )
        for envs, agents in TRAINING:
            # the same number of agent steps per row (at least two iterations: the first is warm-up)
            rates, env_share = measure_training(envs, agents, max(args.training_steps * 10 // agents, 2 * envs * 25))
            print(
                f"| NumPy env, torch CPU policy | {envs} | {agents} | {rates:,.0f} | {rates * agents:,.0f} | "
                f"{env_share:.0%} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
