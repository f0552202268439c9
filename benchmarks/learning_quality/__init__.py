"""How well does each algorithm learn?  msrl against Stable-Baselines3 (SB3) with rl-baselines3-zoo
(rl-zoo) hyper-parameters, config by config.

What it measures, per config in ``configs/`` (a2c_cartpole, dqn_cartpole, ppo_cartpole,
ppo_pendulum, sac_pendulum, td3_pendulum, ddpg_pendulum, impala_cartpole, a3c_cartpole,
pg_cartpole, ac_cartpole, apex_dqn_cartpole, ppo_halfcheetah,
sac_halfcheetah), for msrl as configured there and for SB3's same algorithm with rl-zoo's tuned
hyper-parameters for the env
(DQN CartPole: CleanRL ``dqn.py``'s settings, which the shipped config follows):

* the final greedy return: after training, one deterministic episode in each of
  ``--eval-episodes`` fresh environments (seeded ``seed + 7919``, apart from training's);
  a seed's value is the mean over its episodes, the table gives mean ± sample std over seeds;
* the training wall time (model construction and the final evaluation are not on the clock);
* the wall seconds and env steps until the mean of the last 10 *training* episode returns first
  reached the threshold (CartPole 475, Pendulum -250, HalfCheetah 3000), as a mean over the
  seeds that reached it, with "k/N reached".  msrl reports one mean return per iteration over the
  episodes that ended in it; those count as that many episodes of that return;
* training curves (episode return against env steps and against wall seconds), one PNG per config.

How: both frameworks get the same env-step budget, the msrl config's ``total_env_steps`` (times
``--steps-scale``, or ``--steps``), not rl-zoo's ``n_timesteps``; rl-zoo's ``lin_`` schedules
therefore decay to 0 over that budget, as they do under rl-zoo's ``train.py -n BUDGET``.  Both
stop at the first iteration/rollout that reaches the budget, so either may overshoot it by less
than one iteration; the table gives the steps actually taken.  Seeds 0..N-1 run interleaved
(msrl seed 0, SB3 seed 0, msrl seed 1, ...) in this one process on this one machine, so drifting
machine speed hits both alike.  msrl keeps its own torch thread count (the ``local`` policy's
``cpus``, 1 by default); SB3 is given the same with ``torch.set_num_threads``.  msrl runs with
``progress=false checkpoint_every=0`` (no checkpoints during training, as SB3 writes none) and its
run directories go to a temporary directory under ``--out``.  IMPALA has no SB3 counterpart:
``impala_cartpole`` is compared with SB3's A2C on CartPole-v1 with rl-zoo's hyper-parameters, as are
``a3c_cartpole``, ``pg_cartpole`` and ``ac_cartpole`` (neither SB3 nor CleanRL has A3C, REINFORCE or the
one-step actor-critic); ``apex_dqn_cartpole``'s peer is SB3's DQN at CleanRL's settings.
HalfCheetah-v5 needs ``gymnasium[mujoco]``; without it those configs are skipped with a reason
(the script works inside ``--out``, where MuJoCo writes its ``MUJOCO_LOG.TXT``).

The numbers in BENCHMARKS.md come from::

    python -m benchmarks.learning_quality --seeds 3

which writes ``summary.md``, ``summary.csv``, ``runs.csv``, ``curves.json`` and ``<config>.png``
under ``benchmarks/results/learning``.  SB3 comes from the ``bench`` extra:
``pip install -c constraints.txt -e '.[bench]'`` (and ``'.[mujoco]'`` for HalfCheetah).

Runs made in separate processes (two at a time on two cores, or seeds added with ``--first-seed``)
become one table and plot with ``--merge DIR ...`` (``merge``).

The learning gate (msrl alone, CartPole at reduced budgets, held to stored bands) is msrl's own:
``python -m msrl.app.gate``.  Its records of a run are the ones this benchmark keeps.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness import REPO, command_line
from benchmarks.learning_quality._report import (
    framework_label,
    jsonable,
    machine_info,
    markdown_table,
    plot,
    sources_text,
    summarize,
    write_outputs,
)
from benchmarks.learning_quality._runs import msrl_threads, run_msrl, run_sb3, zoo_hyperparameters
from benchmarks.learning_quality._specs import (
    CONFIG_DIR,
    DEFAULT_OUT,
    FRAMEWORKS,
    PUBLISHED,
    SPECS,
    THRESHOLDS,
    Spec,
)
from benchmarks.learning_quality.merge import MergeError, merge
from msrl.app.gate import WINDOW, TrainingRecord


# -- main -------------------------------------------------------------------------------------------
def mujoco_problem(env_id: str) -> str | None:
    """Why ``env_id`` cannot be built here (MuJoCo envs only), or None."""
    if not env_id.startswith("HalfCheetah"):
        return None
    try:
        import gymnasium

        importlib.import_module("mujoco")
        gymnasium.make(env_id).close()
    except Exception as exc:  # ImportError, DependencyNotInstalled, ...
        hint = "pip install -c constraints.txt -e '.[mujoco]'"
        return f"{env_id} needs gymnasium[mujoco] ({hint}): {str(exc).splitlines()[0]}"
    return None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs",
        default=None,
        help=f"comma-separated configs (default: all: {','.join(SPECS)})",
    )
    parser.add_argument(
        "--seeds", type=int, default=3, help="seeds K..K+N-1 per framework, K = --first-seed (default 3)"
    )
    parser.add_argument(
        "--shared-eval",
        action="store_true",
        help="greedy returns on the same start states for every framework and seed (gymnasium envs reset "
        "with fixed seeds), instead of each framework's own evaluation",
    )
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the first seed: seeds K..K+N-1 (to add seeds to an earlier run without repeating it)",
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--steps-scale", type=float, default=1.0, help="multiply each config's total_env_steps (default 1.0)"
    )
    budget.add_argument(
        "--steps", type=int, default=None, help="env-step budget for every config (overrides the configs')"
    )
    parser.add_argument("--frameworks", default="msrl,sb3", help="comma-separated subset of msrl,sb3 (default both)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default benchmarks/results/learning)"
    )
    parser.add_argument("--eval-episodes", type=int, default=20, help="final greedy episodes per run (default 20)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override for msrl, e.g. algo.compile=true",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="no runs: one table and plot per config from earlier runs' --out directories (written to --out)",
    )
    args = parser.parse_args(argv)
    args.configs = [c.strip() for c in (args.configs or ",".join(SPECS)).split(",") if c.strip()]
    unknown = [c for c in args.configs if c not in SPECS]
    if unknown or not args.configs:
        parser.error(f"unknown config {unknown[0] if unknown else ''!r}; valid choices: {', '.join(SPECS)}")
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if not args.frameworks or any(f not in FRAMEWORKS for f in args.frameworks):
        parser.error(f"--frameworks takes a comma-separated subset of {','.join(FRAMEWORKS)}")
    if args.first_seed < 0:
        parser.error("--first-seed must be >= 0")
    if args.seeds < 1 or args.eval_episodes < 1 or (args.steps is not None and args.steps < 1) or args.steps_scale <= 0:
        parser.error("--seeds, --eval-episodes and --steps must be >= 1, --steps-scale > 0")
    return args


@dataclass
class Plan:
    config: str
    spec: Spec
    budget: int
    threads: int
    threads_note: str


def plan_configs(args: argparse.Namespace) -> tuple[list[Plan], list[str]]:
    """Check every requested config before anything runs; returns the plans and the skip reasons."""
    plans, skipped = [], []
    for config in args.configs:
        spec = SPECS[config]
        problem = mujoco_problem(spec.env_id)
        if problem:
            skipped.append(f"{config}: skipped: {problem}")
            continue
        path = CONFIG_DIR / f"{config}.yaml"
        loaded = None
        if path.exists():
            from msrl.app import load_config

            try:
                loaded = load_config(str(path))
            except Exception as exc:
                sys.exit(f"learning_quality: error: {path.relative_to(REPO)} is not a valid msrl config: {exc}")
            env_id = loaded.raw.get("algo", {}).get("env_id", spec.env_id)
            if loaded.run.algorithm != spec.msrl_algo or env_id != spec.env_id:
                sys.exit(
                    f"learning_quality: error: {path.relative_to(REPO)} trains {loaded.run.algorithm!r} on {env_id!r}; "
                    f"this benchmark expects {spec.msrl_algo!r} on {spec.env_id!r}"
                )
        elif "msrl" in args.frameworks or args.steps is None:
            need = "msrl's runs" if "msrl" in args.frameworks else "the default budget (its total_env_steps)"
            sys.exit(
                f"learning_quality: error: config {path.relative_to(REPO)} not found; it is needed for {need}. "
                f"Choose other --configs{'' if 'msrl' in args.frameworks else ' or give --steps'}."
            )
        if args.steps is not None:
            budget = args.steps
        else:
            with open(path, encoding="utf-8") as handle:
                default = int(yaml.safe_load(handle)["total_env_steps"])
            budget = max(1, round(default * args.steps_scale))
        if loaded is not None:
            threads, note = msrl_threads(loaded), "as msrl's policy uses"
        else:
            threads, note = 1, "msrl config absent: msrl's default for the local policy is 1"
        plans.append(Plan(config, spec, budget, threads, note))
    return plans, skipped


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.merge:
        try:
            print(merge(args.merge, ensure_dir(args.out)))
        except MergeError as exc:
            print(f"learning_quality: error: {exc}", file=sys.stderr)
            return 2
        return 0
    if "sb3" in args.frameworks:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            sys.exit(
                "learning_quality: error: stable-baselines3 is not installed; "
                "pip install -c constraints.txt -e '.[bench]'"
            )
    command = command_line("benchmarks.learning_quality", argv)
    out = ensure_dir(args.out)
    cwd = os.getcwd()
    os.chdir(out)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory: keep it out of the checkout
    try:
        return run_benchmark(args, out, command)
    finally:
        os.chdir(cwd)


def ensure_dir(path: Path) -> Path:
    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def seed_list(args: argparse.Namespace) -> list[int]:
    return list(range(args.first_seed, args.first_seed + args.seeds))


def run_benchmark(args: argparse.Namespace, out: Path, command: str) -> int:
    plans, skipped = plan_configs(args)
    for reason in skipped:
        print(reason, flush=True)
    print(f"command: {command}\nmachine: {machine_info()}\n", flush=True)
    meta: dict[str, Any] = {
        "command": command,
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seeds": seed_list(args),
        "eval_episodes": args.eval_episodes,
        "window": WINDOW,
        "frameworks": args.frameworks,
        "skipped": skipped,
        "configs": {},
    }
    rows: list[dict[str, Any]] = []
    results: list[TrainingRecord] = []
    with tempfile.TemporaryDirectory(prefix="msrl-runs-", dir=out) as runs_dir:
        for p in plans:
            print(
                f"== {p.config}: {p.spec.env_id}, budget {p.budget:,} env steps, SB3 torch threads {p.threads} "
                f"({p.threads_note})" + (f"; {p.spec.note}" if p.spec.note else ""),
                flush=True,
            )
            meta["configs"][p.config] = {
                "env_id": p.spec.env_id,
                "budget": p.budget,
                "threshold": THRESHOLDS[p.spec.env_id],
                "msrl_algorithm": p.spec.msrl_algo,
                "sb3_algorithm": p.spec.sb3_algo,
                "sb3_torch_threads": p.threads,
                "sb3_settings": f"{p.spec.settings_source}: hyperparams/{p.spec.zoo_file} {p.spec.zoo_env}",
                "note": p.spec.note,
                "msrl_overrides": list(args.set),
                "sb3_hyperparameters": jsonable(zoo_hyperparameters(p.spec)),
                "published": [asdict(x) for x in PUBLISHED.get(p.config, [])],
            }
            mine: list[TrainingRecord] = []
            shared_env = p.spec.env_id if args.shared_eval else None
            for seed in seed_list(args):  # interleaved: msrl seed 0, SB3 seed 0, msrl seed 1, ...
                for framework in args.frameworks:
                    if framework == "msrl":
                        r = run_msrl(p.config, seed, p.budget, args.eval_episodes, runs_dir, args.set, shared_env)
                    else:
                        r = run_sb3(p.config, p.spec, seed, p.budget, args.eval_episodes, p.threads, args.shared_eval)
                    mine.append(r)
                    hit = r.reached(THRESHOLDS[p.spec.env_id])
                    where = "not reached" if hit is None else f"at {hit.wall_seconds:.1f} s / {hit.env_steps:,} steps"
                    print(
                        f"  {framework_label(p.spec, framework):<32} seed {seed}: {r.env_steps:>9,} steps "
                        f"{r.wall_seconds:8.1f} s  greedy {r.final_return:8.1f}  "
                        f"threshold {where}",
                        flush=True,
                    )
            results.extend(mine)
            rows.extend(
                summarize(p.config, p.spec, f, [r for r in mine if r.framework == f], p.budget) for f in args.frameworks
            )
            try:
                plot(p.config, p.spec, mine, p.budget, out / f"{p.config}.png")
            except Exception:  # a plot must not cost the numbers
                traceback.print_exc()
            table = markdown_table(rows)
            write_outputs(out, rows, results, meta, table)
    first = args.first_seed
    seeds = f"seed {first}" if args.seeds == 1 else f"seeds {first}–{first + args.seeds - 1} interleaved"
    header = (
        f"Learning quality, msrl vs SB3 (rl-zoo hyper-parameters; DQN: CleanRL's): same env-step budget per config, "
        f"{seeds}, final greedy return over {args.eval_episodes} fresh episodes "
        f"(mean ± std over seeds), threshold on the mean of the last {WINDOW} training episodes "
        f"(time/steps: mean over the seeds that reached it)."
    )
    notes = [SPECS[p.config].note and f"- {p.config}: {SPECS[p.config].note}" for p in plans]
    table = "\n\n".join(
        x
        for x in [
            header,
            markdown_table(rows),
            "\n".join(n for n in notes if n),
            "\n".join(skipped),
            sources_text([p.config for p in plans]),
            f"`{command}` -- {machine_info()}",
        ]
        if x
    )
    print("\n" + table)
    if rows:
        write_outputs(out, rows, results, meta, table)
        print(
            f"\nwrote {out}/summary.md, summary.csv, runs.csv, curves.json and "
            f"{', '.join(p.config + '.png' for p in plans)}"
        )
    return 0
