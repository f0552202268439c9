"""How well do msrl's offline algorithms (IQL, AWAC, CQL) learn from datasets msrl records, at
D4RL's levels, on D4RL's normalised score?

D4RL's recipe, on Pendulum-v1 and HalfCheetah-v5 (``--env``): a policy trained to its config's
budget is the expert (Pendulum: ``configs/sac_pendulum.yaml``; HalfCheetah:
``configs/td3_halfcheetah.yaml``, 1M steps, its deterministic actions recorded with TD3's own
exploration noise, 0.1, as D4RL sampled its SAC policies); the same config stopped at
``--medium-steps`` env steps is the medium policy; each plays ``--episodes`` episodes into a dataset
with ``msrl record`` (the random one with ``--epsilon 1``), and ``msrl merge`` joins the medium and
expert ones into D4RL's medium-expert (twice the episodes).  D4RL's medium-replay (the medium
run's replay buffer) has no counterpart.
Every offline algorithm then trains on each dataset for ``--gradient-steps`` gradient steps of 256
at its shipped config (``configs/<algorithm>_<env>.yaml``, ``--set`` overriding), seeds
interleaved, and is evaluated greedily.  The normalised score is D4RL's: ``100 * (R - R_random) /
(R_expert - R_random)``, with the random and expert datasets' mean episode returns as the two
references, so 0 is the random policy and 100 the expert that made the data; each dataset's own
score (what cloning it would give) is printed beside.

    python -m benchmarks.offline_learning run --workdir ../offline --seeds 1 2 3 4 5 --out offline.jsonl
    python -m benchmarks.offline_learning run --env halfcheetah --workdir ../offline --seeds 1 2 3 \
        --algorithms iql awac --levels medium --gradient-steps 100000 --out offline.jsonl
    python -m benchmarks.offline_learning report offline.jsonl

The policies and the datasets are made once in ``--workdir`` and reused.  A run ``--out`` already
holds is not run again; with ``--runs DIR`` each run keeps its folder there, checkpointed every
``--checkpoint-every`` iterations, and the same command continues an interrupted one from its
checkpoint (CQL on HalfCheetah is hours of a core).

CORL beside msrl: ``--corl CHECKOUT`` (``git clone https://github.com/tinkoff-ai/CORL``) also runs,
after msrl's runs of each algorithm and level, CORL's own ``algorithms/offline/<algorithm>.py`` with
its config of the level's D4RL HalfCheetah dataset, on the same dataset, gradient steps, evaluation
episodes and seed, one torch thread, evaluated once at the end.  Its imports around the algorithm
are stand-ins (``benchmarks/peers/corl``): gym's old API over gymnasium, D4RL's
``qlearning_dataset`` over msrl's dataset, a wandb that logs the evaluations to a file.  Its path
needs ``pyrallis`` in a folder of its own (``pip install --target DEPS pyrallis``, then delete
``DEPS``'s yaml, typing_extensions and mypy_extensions so the environment's are used), given as
``--corl-path DEPS``.

The published figures
the report quotes are the IQL paper's (Kostrikov et al. 2022, table 1) for HalfCheetah's D4RL
datasets: a gap between those and these comes first from the datasets (msrl's recordings, not
D4RL's) and, below D4RL's 1M gradient steps, from the budget.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, append_jsonl, machine_info, markdown_table, read_jsonl

ALGORITHMS = ("iql", "awac", "cql")
LEVELS = ("random", "medium", "expert", "medium-expert")
PRESETS = {
    "local": ["policy=local"],
    "single_learner_coarse": ["policy=single_learner_coarse"],
    "multi_learner": ["policy=multi_learner"],
    "async_single_learner": ["policy=async_single_learner"],
    "gpu_only": ["policy=gpu_only", "policy.device=cpu"],
}
"""The presets an offline algorithm runs under (``single_learner_fine`` has no environment
fragment to fill), as ``--set`` overrides."""
PUBLISHED = {
    # the IQL paper's table 1 (D4RL -v2, normalised): halfcheetah-medium, -medium-replay, -medium-expert
    "iql": "HalfCheetah medium 47.4, medium-replay 44.2, medium-expert 86.7",
    "awac": "HalfCheetah medium 43.5, medium-replay 40.5, medium-expert 42.8",
    "cql": "HalfCheetah medium 44.0, medium-replay 45.5, medium-expert 91.6",
}


@dataclass(frozen=True)
class Recipe:
    """How one environment's datasets are made: the config whose run is the expert (and, stopped
    early, the medium policy), the Gaussian noise its actions are recorded with, and the defaults
    of the episodes per dataset and the medium policy's env steps."""

    source: str
    noise: float
    episodes: int
    medium_steps: int


RECIPES = {
    "pendulum": Recipe("sac_pendulum", 0.0, 100, 2_000),
    "halfcheetah": Recipe("td3_halfcheetah", 0.1, 1_000, 100_000),
}
RECIPES_ORDER, PRESET_ORDER = list(RECIPES), [*PRESETS, "corl"]


def policy_checkpoint(workdir: Path, source: str, name: str, steps: int | None) -> str:
    """The checkpoint of ``configs/<source>.yaml`` trained to ``steps`` (its budget when None),
    made once in ``workdir``."""
    import msrl

    checkpoint = workdir / "runs" / name / "checkpoint.pt"
    if not checkpoint.exists():
        overrides = [f"runs_dir={workdir / 'runs'}", f"name={name}", "progress=false"]
        overrides += [f"total_env_steps={steps}"] if steps else []
        msrl.train(str(REPO / "configs" / f"{source}.yaml"), overrides)
    return str(checkpoint)


def datasets(workdir: Path, env: str, episodes: int, medium_steps: int) -> dict[str, Path]:
    """The four datasets of ``env``, made once in ``workdir``: random, medium and expert recorded,
    and medium-expert (D4RL's mix) the medium episodes then the expert ones.  A policy is trained
    only for a dataset that is missing (HalfCheetah's expert is hours of a core)."""
    from msrl.app import record
    from msrl.data import merge_datasets

    recipe = RECIPES[env]
    made = {}
    levels = (  # level, the policy's run name and budget (None: its config's), epsilon, noise
        ("random", "expert", None, 1.0, 0.0),
        ("medium", "medium", medium_steps, 0.0, recipe.noise),
        ("expert", "expert", None, 0.0, recipe.noise),
    )
    for level, policy, steps, epsilon, noise in levels:
        out = workdir / "datasets" / f"{env}-{level}"
        if not out.exists():
            checkpoint = policy_checkpoint(workdir, recipe.source, f"{env}-{policy}", steps)
            print(record(checkpoint, episodes, out, epsilon=epsilon, noise=noise, seed=100), flush=True)
        made[level] = out
    mixed = workdir / "datasets" / f"{env}-medium-expert"
    if not mixed.exists():
        merge_datasets([made["medium"], made["expert"]], mixed)
    made["medium-expert"] = mixed
    return made


def mean_return(path: Path) -> float:
    from msrl.data import read_episodes

    return statistics.fmean(e.episode_return for e in read_episodes(path))


def run(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir).resolve()
    recipe = RECIPES[args.env]
    episodes = args.episodes or recipe.episodes
    made = datasets(workdir, args.env, episodes, args.medium_steps or recipe.medium_steps)
    references = {level: mean_return(path) for level, path in made.items()}
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine_info(note='torch threads 1')}")
    print("# dataset mean returns:", {level: round(value, 1) for level, value in references.items()}, flush=True)
    done = {record_key(r) for r in read_jsonl([args.out])} if Path(args.out).exists() else set()
    peer = ["corl"] if args.corl else []
    for seed in args.seeds:  # interleaved: the machine's load falls on every algorithm alike
        for level, algorithm, policy in itertools.product(args.levels, args.algorithms, [*args.policies, *peer]):
            settings = () if policy == "corl" else tuple(args.set)
            key = (args.env, level, algorithm, policy, seed, args.gradient_steps, settings)
            if key in done:
                print(algorithm, level, policy, seed, f"already in {args.out}", flush=True)
                continue
            if policy == "corl":
                record = corl_run(algorithm, level, made[level], seed, references, args)
            else:
                record = train_once(algorithm, level, made[level], seed, policy, args)
            record.update(
                env=args.env,
                level=level,
                dataset_return=references[level],
                random_return=references["random"],
                expert_return=references["expert"],
            )
            append_jsonl(args.out, record)
            seconds = "" if record["wall_s"] is None else f"{record['wall_s']:.0f} s"
            print(algorithm, level, policy, seed, f"greedy {record['greedy_return']:.1f}", seconds, flush=True)


def record_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two records the same run: environment, dataset, algorithm, preset, seed, budget
    and overrides."""
    run = (record["level"], record["algorithm"], record["policy"], record["seed"], record["gradient_steps"])
    return (record.get("env", "pendulum"), *run, tuple(record.get("settings", [])))


def train_once(
    algorithm: str, level: str, dataset: Path, seed: int, policy: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of ``configs/<algorithm>_<env>.yaml`` on ``dataset`` under ``policy``: in a scratch
    folder, or with ``--runs`` in a folder of its own there, checkpointed as it goes, continued from
    its checkpoint when one is there and read back when it has finished."""
    import msrl
    from msrl.app import CHECKPOINT_NAME, EVAL_NAME

    config = REPO / "configs" / f"{algorithm}_{args.env}.yaml"
    overrides = [f"algo.dataset={dataset}", f"seed={seed}", "progress=false", *PRESETS[policy]]
    overrides += [f"total_env_steps={256 * args.gradient_steps}", f"eval_episodes={args.eval_episodes}", *args.set]
    record = {"algorithm": algorithm, "seed": seed, "policy": policy, "gradient_steps": args.gradient_steps}
    record["settings"] = list(args.set)
    start = time.perf_counter()
    if args.runs is None:
        with tempfile.TemporaryDirectory(prefix="msrl-offline-") as runs:
            result = msrl.train(str(config), [f"runs_dir={runs}", "checkpoint_every=0", *overrides])
        assert result.evaluation is not None
        return record | {"greedy_return": result.evaluation.mean, "wall_s": time.perf_counter() - start}
    name = f"{args.env}-{level}_{algorithm}_{policy}_{args.gradient_steps}steps_seed{seed}"
    if args.set:  # runs with other overrides are other runs
        name += "_" + hashlib.sha1(" ".join(args.set).encode()).hexdigest()[:8]
    run_dir = Path(args.runs).resolve() / name / config.stem
    if (run_dir / EVAL_NAME).exists():
        evaluation = json.loads((run_dir / EVAL_NAME).read_text(encoding="utf-8"))
        return record | {"greedy_return": evaluation["mean"], "wall_s": None, "run_dir": str(run_dir)}
    if (run_dir / CHECKPOINT_NAME).exists():
        result = msrl.train(None, ["progress=false"], resume=str(run_dir / CHECKPOINT_NAME))
    else:
        checkpoints = f"checkpoint_every={args.checkpoint_every}"
        result = msrl.train(str(config), [f"runs_dir={run_dir.parent}", checkpoints, *overrides])
    if result.stopped_by is not None:  # Ctrl-C or a preemption's notice: checkpointed, not finished
        raise SystemExit(f"{result.stop_line()}; or run this command again")
    assert result.evaluation is not None
    seconds = time.perf_counter() - start if result.resumed_at is None else None  # only part of it ran here
    record |= {"greedy_return": result.evaluation.mean, "wall_s": seconds, "train_s": result.wall_time}
    return record | {"run_dir": str(run_dir)}


CORL_CONFIGS = {level: level.replace("-", "_") + "_v2" for level in LEVELS}
"""CORL's config file of each level (its D4RL HalfCheetah settings, which msrl's configs follow)."""
CORL_OPTIONS = {
    "iql": ("max_timesteps", "eval_freq", "n_episodes"),
    "cql": ("max_timesteps", "eval_freq", "n_episodes"),
    "awac": ("num_train_ops", "eval_frequency", "n_test_episodes"),
}
"""Each CORL file's names of its gradient steps, its evaluation interval and its episodes an evaluation."""
STAND_INS = Path(__file__).resolve().parent / "peers" / "corl"


def corl_run(
    algorithm: str, level: str, dataset: Path, seed: int, references: dict[str, float], args: argparse.Namespace
) -> dict[str, Any]:
    """CORL's own ``algorithms/offline/<algorithm>.py`` with its config for ``level``, on the same
    dataset, gradient steps and evaluation episodes, evaluated once at the end; ``gym``, ``d4rl``
    and ``wandb`` are stand-ins over gymnasium, msrl's dataset and a log file
    (``benchmarks/peers/corl/README.md``)."""
    from msrl.data import read_info

    checkout = Path(args.corl).resolve()
    config = checkout / "configs" / "offline" / algorithm / "halfcheetah" / f"{CORL_CONFIGS[level]}.yaml"
    info = read_info(dataset)
    steps, every, episodes = CORL_OPTIONS[algorithm]
    command = [sys.executable, str(checkout / "algorithms" / "offline" / f"{algorithm}.py")]
    command += ["--config_path", str(config), "--device", "cpu", "--seed", str(seed)]
    command += [f"--{steps}", str(args.gradient_steps)]
    command += [f"--{every}", str(args.gradient_steps), f"--{episodes}", str(args.eval_episodes)]
    command += ["--buffer_size", str(info.total_steps)]  # its replay holds the dataset: no 10M rows allocated
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="msrl-corl-") as scratch:
        log = Path(scratch) / "evaluations.jsonl"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(STAND_INS), *args.corl_path, str(REPO)]),
            "OMP_NUM_THREADS": "1",
            "MSRL_CORL_DATASET": str(dataset),
            "MSRL_CORL_ENV_ID": str(info.env_id),
            "MSRL_CORL_REF_MIN": repr(references["random"]),
            "MSRL_CORL_REF_MAX": repr(references["expert"]),
            "MSRL_CORL_LOG": str(log),
        }
        start = time.perf_counter()
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        evaluations = read_jsonl([log]) if log.exists() else []
    if done.returncode != 0 or not evaluations:
        raise SystemExit(f"msrl: error: CORL's {algorithm} run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    last = evaluations[-1]
    low, high = references["random"], references["expert"]
    greedy = last["eval_score"] if "eval_score" in last else low + last["d4rl_normalized_score"] / 100 * (high - low)
    return {
        "algorithm": algorithm,
        "seed": seed,
        "policy": "corl",
        "gradient_steps": args.gradient_steps,
        "settings": [],
        "greedy_return": greedy,
        "wall_s": seconds,
        "corl_commit": commit,
    }


def normalised(value: float, record: dict[str, Any]) -> float:
    return 100.0 * (value - record["random_return"]) / (record["expert_return"] - record["random_return"])


def report(paths: list[str]) -> None:
    records = read_jsonl(paths)
    groups: dict[tuple[str, str, str, str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        settings = " ".join(record.get("settings", []))
        env = record.get("env", "pendulum")
        key = (env, record["algorithm"], record["level"], record["policy"], record["gradient_steps"], settings)
        groups[key].append(record)
    rows = []

    def order(key: tuple[str, str, str, str, int, str]) -> tuple[Any, ...]:
        return (
            RECIPES_ORDER.index(key[0]),
            ALGORITHMS.index(key[1]),
            LEVELS.index(key[2]),
            PRESET_ORDER.index(key[3]),
            key[4:],
        )

    for (env, algorithm, level, policy, steps, settings), runs in sorted(groups.items(), key=lambda kv: order(kv[0])):
        scores = [normalised(r["greedy_return"], r) for r in runs]
        returns = [r["greedy_return"] for r in runs]
        spread = lambda xs: statistics.pstdev(xs) if len(xs) > 1 else 0.0  # noqa: E731
        rows.append(
            [
                env,
                algorithm,
                level,
                "CORL's own file" if policy == "corl" else f"`{policy}`",
                f"`{settings}`" if settings else "shipped",
                f"{steps:,}",
                len(runs),
                f"{statistics.fmean(returns):.1f} ± {spread(returns):.1f}",
                f"**{statistics.fmean(scores):.1f} ± {spread(scores):.1f}**",
                f"{normalised(runs[0]['dataset_return'], runs[0]):.1f}",
                PUBLISHED[algorithm],
            ]
        )
    header = [
        "environment",
        "algorithm",
        "dataset",
        "policy",
        "settings",
        "gradient steps",
        "seeds",
        "greedy return",
        "normalised",
        "dataset's own",
        "published (IQL paper, D4RL)",
    ]
    print(markdown_table(header, rows))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.offline_learning", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="make the datasets (once) and train every algorithm on each")
    go.add_argument("--env", choices=list(RECIPES), default="pendulum", help="the datasets' environment")
    go.add_argument("--workdir", required=True, help="where the policies' runs and the datasets are kept")
    go.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    go.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    go.add_argument("--levels", nargs="+", default=list(LEVELS), choices=LEVELS)
    go.add_argument("--policies", nargs="+", default=["local"], choices=list(PRESETS), help="presets (default local)")
    go.add_argument("--gradient-steps", type=int, default=5_000)
    go.add_argument("--episodes", type=int, help="episodes per dataset (default: Pendulum 100, HalfCheetah 1,000)")
    go.add_argument(
        "--medium-steps", type=int, help="env steps of the medium policy (Pendulum 2,000, HalfCheetah 100,000)"
    )
    go.add_argument("--eval-episodes", type=int, default=20)
    go.add_argument("--corl", help="a CORL checkout: its own file of each algorithm runs too, after msrl's")
    go.add_argument(
        "--corl-path", nargs="+", default=[], metavar="DEPS", help="folders CORL's files need on their path (pyrallis)"
    )
    go.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override, repeatable")
    go.add_argument(
        "--out", required=True, help="JSONL file the runs are appended to; runs it already holds are not run again"
    )
    go.add_argument(
        "--runs",
        help="keep each run's folder here, checkpointed, and continue an unfinished one (default: scratch folders)",
    )
    go.add_argument("--checkpoint-every", type=int, default=1000, help="iterations between a kept run's checkpoints")
    rep = sub.add_parser("report", help="the table of runs recorded")
    rep.add_argument("paths", nargs="+")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.command == "report":
        report(args.paths)
    else:
        run(args)


if __name__ == "__main__":
    main()
