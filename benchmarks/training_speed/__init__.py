"""How fast does msrl train, and how soon does it solve CartPole?  PPO on CartPole-v1: msrl
(``local`` policy) against Stable-Baselines3 and RLlib on one machine's CPU, or msrl alone on a
device (a GPU: WarpDrive's trainer on the same GPU is ``benchmarks.warpdrive --sections ppo``).

Every framework gets the same env-step budget and the same evaluation schedule
(greedy policy, 20 fresh environments, one episode each, every ``--eval-every``
env steps), and each runs with one torch thread, so the comparison measures the
frameworks rather than how many cores each happens to grab.  Evaluation time is
kept off the training clock: a framework that evaluates more slowly should not
look like it learns more slowly.  Seeds are interleaved: msrl, then each peer, per seed.

msrl uses ``configs/ppo_cartpole.yaml`` as shipped (``--set KEY=VALUE`` overrides it, msrl
only).  SB3 uses the tuned rl-zoo hyper-parameters for CartPole-v1.  RLlib (``--peers sb3,rllib``)
runs its new API stack PPO at the shipped config's settings (``_rllib.py`` here says
what is matched and what cannot be), sampling in this process; Ray is started once, on
loopback, before the first run, so every framework runs beside the same idle Ray.  A peer
that is not installed is skipped with one line.

    python -m benchmarks.training_speed --budget 150000 --seeds 1 2 3 --peers sb3,rllib

Two times to the threshold are reported: to the first greedy evaluation at or above it
(only as fine as ``--eval-every``), and to the first point where the mean return of the last
100 *training* episodes reaches it (msrl reports one mean per iteration, counted as that many
episodes).  The markdown table at the end can be pasted into BENCHMARKS.md as is.

Device mode (msrl alone, large batches, the shipped PPO settings: 4 epochs x 8 minibatches):

    python -m benchmarks.training_speed --device cuda --num-envs 4096 16384 65536 --budget 20000000

runs the ``local`` policy with the ``torch`` executor (``--executor cuda`` for the kernel envs)
on the device at each number of environments, and prints end-to-end env steps/s, the seconds per
iteration spent in each phase, and the training seconds to the threshold (process and CUDA
start-up and tracing excluded; the first iteration, CUDA warm-up included, is timed).
``--device cpu`` runs the same layout on the CPU, to check the command before a GPU is at hand.
"""

from __future__ import annotations

import argparse
import math
import platform
import tempfile
from collections.abc import Sequence

import torch

from benchmarks.harness import REPO, Stopwatch, command_line, machine_info, start_ray
from benchmarks.training_speed._records import (
    EvalSchedule,
    RunRecord,
    device_table,
    markdown_table,
    profile_table,
    ratio_summary,
)

MSRL_CONFIG = REPO / "configs" / "ppo_cartpole.yaml"
TORCH_THREADS = 1
EVAL_SEED_OFFSET = 7919
"""Evaluation environments are seeded apart from training ones, identically at every evaluation."""
PEERS = ("sb3", "rllib")


# -- msrl -------------------------------------------------------------------------------------------
def ray_cpus(overrides: Sequence[str]) -> int:
    """Logical CPUs of the Ray that msrl shares with RLlib: two, or under a policy other than
    ``local`` (``--set policy=...``) what that policy reserves, as msrl's own embedded Ray offers."""
    from cluster import demand_of
    from msrl.app import load_config

    policy = load_config(str(MSRL_CONFIG), ["policy=local", *overrides]).policy
    return max(2, math.ceil(demand_of(policy).get("CPU", 0.0)))


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
                if step.get("episodes") and math.isfinite(step.get("episode_return", math.nan)):
                    count = int(step["episodes"])
                    record.add_episodes(record.env_steps, clock.seconds, [step["episode_return"]] * count)
                for key, value in step.items():
                    if key.startswith("time_") and "/" not in key:
                        record.phase_seconds[key[5:]] = record.phase_seconds.get(key[5:], 0.0) + value
                if record.iterations == 1:
                    record.first = (record.env_steps, clock.seconds, dict(record.phase_seconds))
                schedule.maybe_evaluate(record.env_steps)
            schedule.finish()  # the final policy lives in the workers of a distributed run: before close
        finally:
            trainer.close()
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
    train_env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        env=train_env,
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
        assert isinstance(returns, list)  # return_episode_rewards=True: one return per episode
        return [float(r) for r in returns]

    schedule = EvalSchedule(record, clock, eval_every, greedy_returns)

    class ScheduledEval(BaseCallback):
        def _on_training_start(self) -> None:
            clock.start()

        def _on_rollout_start(self) -> None:
            schedule.maybe_evaluate(self.num_timesteps)

        def _on_step(self) -> bool:  # Monitor's info["episode"] marks each training episode's end
            ended = [float(info["episode"]["r"]) for info in self.locals["infos"] if "episode" in info]
            record.add_episodes(self.num_timesteps, clock.seconds, ended)
            return True

    model.learn(total_timesteps=budget, callback=ScheduledEval())
    clock.stop()
    record.env_steps = model.num_timesteps
    schedule.finish()
    eval_env.close()
    train_env.close()
    return record


# -- RLlib --------------------------------------------------------------------------------------------
def run_rllib(seed: int, budget: int, eval_every: int, eval_episodes: int) -> RunRecord:
    """RLlib's PPO at the settings of the shipped msrl config (without ``--set``'s overrides)."""
    from benchmarks.training_speed._rllib import shipped_settings, train_rllib

    return train_rllib(shipped_settings(MSRL_CONFIG), seed, budget, eval_every, eval_episodes, seed + EVAL_SEED_OFFSET)


def missing_peer(peer: str) -> str | None:
    """One line saying why ``peer`` cannot run here, or None when it can."""
    if peer == "rllib":
        from benchmarks.training_speed._rllib import rllib_missing

        return rllib_missing()
    try:
        import stable_baselines3  # noqa: F401
    except ImportError as exc:
        return f"SB3 skipped: stable-baselines3 is not importable ({exc}); `make install-bench` installs it"
    return None


RUNNERS = {"sb3": run_sb3, "rllib": run_rllib}


# -- device mode and report -------------------------------------------------------------------------
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
    print(f"\n`{command}` -- {machine()}")
    return 0


def machine(peers: Sequence[str] = ()) -> str:
    packages = ["torch", "gymnasium", "stable-baselines3", *(["ray"] if "rllib" in peers else [])]
    return machine_info(packages, note=f"torch.set_num_threads({TORCH_THREADS}) for every framework")


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
    parser.add_argument(
        "--peers",
        default="sb3",
        help=f"comma-separated frameworks to run beside msrl, from {', '.join(PEERS)}, or 'none' (default sb3)",
    )
    parser.add_argument("--skip-sb3", action="store_true", help="leave SB3 out of --peers")
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
        help="override msrl's config (configs/ppo_cartpole.yaml), as with 'msrl train --set'; repeatable, "
        "msrl only (e.g. --set algo.compile=true)",
    )
    args = parser.parse_args(argv)
    names = [p.strip().lower() for p in args.peers.split(",") if p.strip() and p.strip().lower() != "none"]
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        parser.error(f"--peers: unknown {', '.join(unknown)}; choose from {', '.join(PEERS)} or none")
    args.peers = [p for p in dict.fromkeys(names) if not (args.skip_sb3 and p == "sb3")]
    for name in ("budget", "eval_every", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(n < 1 for n in args.num_envs):
        parser.error("--num-envs must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(TORCH_THREADS)
    command = command_line("benchmarks.training_speed", argv)
    print(f"command: {command}\nmachine: {machine(args.peers)}\n", flush=True)
    if args.device:
        return run_device_mode(args, command)
    peers = []
    for peer in args.peers:
        missing = missing_peer(peer)
        if missing:
            print(missing, flush=True)
        else:
            peers.append(peer)
    if "rllib" in peers:  # before the first run, so that every framework runs beside the same idle Ray
        start_ray(num_cpus=ray_cpus(args.overrides))
    records: list[RunRecord] = []
    for seed in args.seeds:  # interleave frameworks so drifting machine load hits all alike
        records.append(run_msrl(seed, args.budget, args.eval_every, args.eval_episodes, args.overrides))
        for peer in peers:
            records.append(RUNNERS[peer](seed, args.budget, args.eval_every, args.eval_episodes))
    print(
        f"\nPPO CartPole-v1, budget {args.budget:,} env steps, greedy eval of {args.eval_episodes} episodes "
        f"every {args.eval_every:,} steps (eval time excluded), torch threads {TORCH_THREADS}.\n"
    )
    print(markdown_table(records, args.threshold))
    print("", profile_table(records), sep="\n")
    print("", *ratio_summary(records, args.threshold), sep="\n")
    print(f"\n`{command}` -- {machine(peers)}")
    return 0
