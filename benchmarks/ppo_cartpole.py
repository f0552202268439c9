"""PPO on CartPole-v1: msrl (``local`` policy) against Stable-Baselines3, on one machine.

Both frameworks get the same env-step budget and the same evaluation schedule
(greedy policy, 20 fresh environments, one episode each, every ``--eval-every``
env steps), and both run with one torch thread, so the comparison measures the
frameworks rather than how many cores each happens to grab.  Evaluation time is
kept off the training clock: a framework that evaluates more slowly should not
look like it learns more slowly.

SB3 uses the tuned rl-zoo hyper-parameters for CartPole-v1; msrl uses
``configs/ppo_cartpole.yaml`` as shipped.

    python benchmarks/ppo_cartpole.py --budget 100000 --seeds 1 2 3

The markdown table at the end can be pasted into BENCHMARKS.md as is.

Device mode (msrl alone, large batches, the shipped PPO settings: 4 epochs x 8 minibatches):

    python benchmarks/ppo_cartpole.py --device cuda --num-envs 4096 16384 65536 --budget 20000000

runs the ``local`` policy with the ``torch`` executor (``--executor cuda`` for the kernel envs)
on the device at each number of environments, and prints end-to-end env steps/s, the seconds per
iteration spent in each phase, and the training seconds to the threshold (process and CUDA
start-up and tracing excluded; the first iteration, CUDA warm-up included, is timed).
``--device cpu`` runs the same layout on the CPU, to check the command before a GPU is at hand.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from _ppo_cartpole_measure import EvalSchedule, RunRecord, Stopwatch

REPO_ROOT = Path(__file__).resolve().parents[1]
MSRL_CONFIG = REPO_ROOT / "configs" / "ppo_cartpole.yaml"
TORCH_THREADS = 1
EVAL_SEED_OFFSET = 7919
"""Evaluation environments are seeded apart from training ones, identically at every evaluation."""


# -- msrl -------------------------------------------------------------------------------------------
def run_msrl(seed: int, budget: int, eval_every: int, eval_episodes: int, overrides: Sequence[str] = ()) -> RunRecord:
    """Train msrl's PPO with the local policy, one iteration at a time (``msrl.app.Trainer``).

    Building, tracing and partitioning happen before the clock starts, as SB3's
    model construction does; the final greedy evaluation is always taken."""
    from msrl.app import Trainer

    record, clock = RunRecord("msrl", seed), Stopwatch()
    with tempfile.TemporaryDirectory(prefix="msrl-bench-") as runs_dir:
        trainer = Trainer(
            str(MSRL_CONFIG),
            [
                "policy=local",
                "progress=false",
                "eval_episodes=0",
                "checkpoint_every=0",
                f"runs_dir={runs_dir}",
                f"seed={seed}",
                f"total_env_steps={budget}",
                *overrides,
            ],
        )
        schedule = EvalSchedule(
            record, clock, eval_every, lambda: trainer.evaluate(eval_episodes, seed=seed + EVAL_SEED_OFFSET).returns
        )
        try:
            clock.start()
            while not trainer.done:
                step = trainer.step()
                record.env_steps = step["env_steps"]
                record.iterations += 1
                for key, value in step.items():
                    if key.startswith("time_") and "/" not in key:
                        record.phase_seconds[key[5:]] = record.phase_seconds.get(key[5:], 0.0) + value
                schedule.maybe_evaluate(record.env_steps)
            clock.stop()
        finally:
            trainer.close()
    _finish(record, clock, schedule)
    return record


# -- Stable-Baselines3 --------------------------------------------------------------------------------
def sb3_zoo_hyperparameters() -> dict:
    """rl-baselines3-zoo's tuned PPO settings for CartPole-v1 (hyperparams/ppo.yml),
    with its ``lin_`` schedules: value * progress_remaining, decaying to 0."""
    from stable_baselines3.common.utils import LinearSchedule

    return dict(
        policy="MlpPolicy",
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=LinearSchedule(1e-3, 0.0, 1.0),
        clip_range=LinearSchedule(0.2, 0.0, 1.0),
    )


def run_sb3(seed: int, budget: int, eval_every: int, eval_episodes: int) -> RunRecord:
    """Train SB3's PPO (8 DummyVecEnv envs) and evaluate through a callback.

    Evaluation runs at the start of a rollout, i.e. right after an update, so it
    sees the policy trained on every step counted so far, as msrl's does."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    record, clock = RunRecord("SB3", seed), Stopwatch()
    eval_seed = seed + EVAL_SEED_OFFSET
    eval_env = make_vec_env("CartPole-v1", n_envs=eval_episodes, seed=eval_seed)
    model = PPO(
        env=make_vec_env("CartPole-v1", n_envs=8, seed=seed),
        device="cpu",
        seed=seed,
        verbose=0,
        **sb3_zoo_hyperparameters(),
    )

    def greedy_returns() -> list[float]:
        eval_env.seed(eval_seed)  # the same 20 fresh starts at every evaluation
        returns, _ = evaluate_policy(
            model, eval_env, n_eval_episodes=eval_episodes, deterministic=True, return_episode_rewards=True
        )
        return [float(r) for r in returns]

    schedule = EvalSchedule(record, clock, eval_every, greedy_returns)

    class ScheduledEval(BaseCallback):
        def _on_training_start(self) -> None:
            clock.start()

        def _on_rollout_start(self) -> None:
            schedule.maybe_evaluate(self.num_timesteps)

        def _on_step(self) -> bool:
            return True

    model.learn(total_timesteps=budget, callback=ScheduledEval())
    clock.stop()
    record.env_steps = model.num_timesteps
    _finish(record, clock, schedule)
    eval_env.close()
    model.get_env().close()
    return record


def _finish(record: RunRecord, clock: Stopwatch, schedule: EvalSchedule) -> None:
    """Freeze the training time and make sure the curve ends with the final policy."""
    clock.stop()
    if not record.curve or record.curve[-1].env_steps != record.env_steps:
        schedule.maybe_evaluate(record.env_steps, force=True)
    record.train_seconds = clock.seconds


# -- report -----------------------------------------------------------------------------------------
def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f}"


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None or denominator <= 0:
        return "n/a"
    return f"{numerator / denominator:.2f}x"


def markdown_table(records: Sequence[RunRecord], threshold: float) -> str:
    """One row per framework and seed; msrl rows carry their ratio to SB3 with the same seed."""
    sb3 = {r.seed: r for r in records if r.framework == "SB3"}
    lines = [
        f"| framework | seed | env steps | env steps/s | wall s to greedy >= {threshold:g} | final greedy return "
        "| steps/s msrl/SB3 | time-to-threshold SB3/msrl |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        other = sb3.get(r.seed) if r.framework == "msrl" else None
        speed = _ratio(r.steps_per_second, other.steps_per_second) if other else ""
        time_ratio = _ratio(other.seconds_to(threshold), r.seconds_to(threshold)) if other else ""
        lines.append(
            f"| {r.framework} | {r.seed} | {r.env_steps:,} | {r.steps_per_second:,.0f} | "
            f"{_seconds(r.seconds_to(threshold))} | {r.final_return:.1f} | {speed} | {time_ratio} |"
        )
    return "\n".join(lines)


def device_table(records: Sequence[RunRecord], threshold: float) -> str:
    """Device mode: one row per number of environments and seed, with the time split per iteration."""
    phases = ("env", "inference", "buffer", "learn", "communication")
    lines = [
        "| num_envs | seed | env steps | env steps/s | s/iter | "
        + " | ".join(f"{p} s/iter" for p in phases)
        + f" | s to greedy >= {threshold:g} | final greedy return |",
        "|---:|---:|---:|---:|---:|" + "---:|" * len(phases) + "---:|---:|",
    ]
    for r in records:

        def per(seconds: float, r: RunRecord = r) -> str:
            return f"{seconds / r.iterations:.4f}" if r.iterations else "n/a"

        lines.append(
            f"| {r.num_envs:,} | {r.seed} | {r.env_steps:,} | {r.steps_per_second:,.0f} | "
            f"{per(r.train_seconds)} | "
            + " | ".join(per(r.phase_seconds.get(p, 0.0)) for p in phases)
            + f" | {_seconds(r.seconds_to(threshold))} | {r.final_return:.1f} |"
        )
    return "\n".join(lines)


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def run_device_mode(args: argparse.Namespace, command: str) -> int:
    records = []
    for num_envs in args.num_envs:
        for seed in args.seeds:
            overrides = [
                f"policy.executor={args.executor}",
                f"policy.device={args.device}",
                f"algo.num_envs={num_envs}",
                "algo.fused=false",
                *args.overrides,
            ]
            record = run_msrl(seed, args.budget, args.eval_every, args.eval_episodes, overrides)
            record.num_envs = num_envs
            records.append(record)
    print(
        f"\nPPO CartPole-v1 on {args.device} ({device_name(args.device)}), executor {args.executor}, "
        f"budget {args.budget:,} env steps, greedy eval of {args.eval_episodes} episodes every "
        f"{args.eval_every:,} steps (eval time excluded).\n"
    )
    print(device_table(records, args.threshold))
    print(f"\n`{command}` -- {machine_info()}")
    return 0


def machine_info() -> str:
    import gymnasium

    versions = [
        f"python {platform.python_version()}",
        f"torch {torch.__version__}",
        f"gymnasium {gymnasium.__version__}",
    ]
    try:
        import stable_baselines3

        versions.append(f"stable-baselines3 {stable_baselines3.__version__}")
    except ImportError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{platform.platform()}, {platform.processor() or platform.machine()}, "
        f"cpu_count {os.cpu_count()} ({usable} usable); {', '.join(versions)}; "
        f"torch.set_num_threads({TORCH_THREADS}) for both frameworks"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=100_000, help="env steps per training run (default 100000)")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[1], help="seeds, one run per framework each (default 1)"
    )
    parser.add_argument(
        "--eval-every", type=int, default=10_240, help="env steps between greedy evaluations (default 10240)"
    )
    parser.add_argument(
        "--eval-episodes", type=int, default=20, help="greedy episodes (fresh envs) per evaluation (default 20)"
    )
    parser.add_argument(
        "--threshold", type=float, default=475.0, help="greedy mean return counted as solved (default 475)"
    )
    parser.add_argument("--skip-sb3", action="store_true", help="run msrl only")
    parser.add_argument("--device", help="device mode: msrl alone on this torch device (cuda, cuda:N, cpu)")
    parser.add_argument(
        "--num-envs",
        type=int,
        nargs="+",
        default=[4096, 16384, 65536],
        help="device mode: numbers of environments, one run each (default 4096 16384 65536)",
    )
    parser.add_argument(
        "--executor",
        default="torch",
        choices=["torch", "cuda"],
        help="device mode: torch (torch env backend) or cuda (CUDA C kernel envs); default torch",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override msrl's config (configs/ppo_cartpole.yaml), as with 'msrl train --set'",
    )
    args = parser.parse_args(argv)
    for name in ("budget", "eval_every", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(n < 1 for n in args.num_envs):
        parser.error("--num-envs must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(TORCH_THREADS)
    command = shlex.join(["python", *sys.argv])
    print(f"command: {command}\nmachine: {machine_info()}\n", flush=True)
    if args.device:
        return run_device_mode(args, command)
    records: list[RunRecord] = []
    for seed in args.seeds:  # interleave frameworks so drifting machine load hits both alike
        records.append(run_msrl(seed, args.budget, args.eval_every, args.eval_episodes, args.overrides))
        if not args.skip_sb3:
            records.append(run_sb3(seed, args.budget, args.eval_every, args.eval_episodes))
    print(
        f"\nPPO CartPole-v1, budget {args.budget:,} env steps, greedy eval of {args.eval_episodes} episodes "
        f"every {args.eval_every:,} steps (eval time excluded), torch threads {TORCH_THREADS}.\n"
    )
    print(markdown_table(records, args.threshold))
    print(f"\n`{command}` -- {machine_info()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
