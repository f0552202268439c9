"""How fast does msrl train from pixels?  PPO on Atari Pong at the shipped settings
(``configs/ppo_atari.yaml``: CleanRL's ``ppo_atari_envpool``: 8 environments x 128 steps, 4 epochs
of 4 minibatches, the Nature-CNN) beside Stable-Baselines3's ``CnnPolicy`` at the same settings
(rl-zoo's Atari PPO entry: its ``AtariWrapper`` and a 4-frame ``VecFrameStack`` over
``PongNoFrameskip-v4``), on the same cores, runs interleaved; and how fast msrl steps the games
beside ale-py's bare ``AtariVectorEnv`` (and EnvPool, where installed) with the same threads.

Both frameworks get ``--threads`` torch threads (and msrl's emulators the same number of C++
threads, as the shipped config's ``cpus: 2`` gives them); SB3 steps its 8 environments one after
the other in this process (its ``make_atari_env`` default).  Throughput is measured after
``--warmup`` iterations (msrl: loading its compiled step from the cache, or building it;
SB3: its first rollout), in agent steps (4 frames each).  msrl's row carries its profile: the
milliseconds per agent step its records give to the environment, inference, the buffer and
learning.

    python -m benchmarks.atari_speed --budget 10240 --rounds 2
    python -m benchmarks.atari_speed --sections env --env-steps 3000
    python -m benchmarks.atari_speed --sections train --frameworks msrl,sb3,cleanrl \
        --cleanrl cleanrl/ppo_atari_envpool.py --cleanrl-python ../cleanrl-venv/bin/python

``--sections impala`` times IMPALA at ``configs/impala_atari.yaml`` (``async_single_learner``: an
actor process and a learner process) beside RLlib's IMPALA and APPO (``rllib-impala``,
``rllib-appo``) and Sample Factory's APPO (``sf``); ``--frameworks ...,rllib`` adds RLlib's PPO to
the PPO rows (``benchmarks.atari_peers`` says how each peer is set up)::

    python -m benchmarks.atari_speed --sections impala --impala-frameworks msrl,rllib-impala,rllib-appo,sf \
        --sample-factory-python ../sf-venv/bin/python

Sample Factory runs in an environment of its own too::

    python -m venv ../sf-venv
    ../sf-venv/bin/pip install torch sample-factory==2.1.1 "numpy<2" "gymnasium<1.0" ale-py==0.9.1

CleanRL's script runs as it is published, in an environment of its own (it needs ``gym`` and an
EnvPool whose ``gym`` API it was written for)::

    python -m venv ../cleanrl-venv
    ../cleanrl-venv/bin/pip install torch envpool==0.8.4 "numpy<2" gym==0.23.1 tyro tensorboard

Run msrl once first (``msrl train configs/ppo_atari.yaml --set total_env_steps=4096``) so that
its compiled learner is in the cache; otherwise its warm-up iterations run while it compiles.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.atari_peers import SAMPLE_FACTORY, run_rllib, run_sample_factory
from benchmarks.harness import REPO, command_line, in_turn, machine_info, markdown_table

CONFIG = REPO / "configs" / "ppo_atari.yaml"
IMPALA_CONFIG = REPO / "configs" / "impala_atari.yaml"
GAME, ENV_ID, SB3_ENV_ID = "pong", "ALE/Pong-v5", "PongNoFrameskip-v4"


# -- training ---------------------------------------------------------------------------------------
def run_msrl(budget: int, warmup: int, threads: int, seed: int, config: Path = CONFIG) -> dict[str, Any]:
    """msrl at a shipped Atari config, one iteration at a time; steps/s after ``warmup``.  PPO's
    ``local`` policy gets ``threads`` cores; IMPALA's ``async_single_learner`` a core per process."""
    from msrl.app import Trainer

    with tempfile.TemporaryDirectory(prefix="msrl-atari-") as runs_dir:
        overrides = ["progress=false", "eval_episodes=0", "checkpoint_every=0", f"runs_dir={runs_dir}"]
        overrides += [f"seed={seed}", f"total_env_steps={budget}"]
        overrides += [f"policy.cpus={threads}"] if config == CONFIG else []
        trainer = Trainer(str(config), overrides)
        phases: dict[str, float] = {}
        try:
            steps0 = 0
            for _ in range(warmup):
                steps0 = trainer.step()["env_steps"]
            start = time.perf_counter()
            while not trainer.done:
                step = trainer.step()
                for key, value in step.items():
                    if key.startswith("time_") and "/" not in key:
                        phases[key[5:]] = phases.get(key[5:], 0.0) + value
            seconds, steps = time.perf_counter() - start, step["env_steps"] - steps0
        finally:
            trainer.close()
    profile = {name: 1e3 * value / steps for name, value in phases.items()}
    return {"framework": "msrl", "steps_per_s": steps / seconds, "profile": profile}


def run_msrl_impala(budget: int, warmup: int, threads: int, seed: int) -> dict[str, Any]:
    return run_msrl(budget, warmup, threads, seed, IMPALA_CONFIG)


def run_sb3(budget: int, warmup: int, threads: int, seed: int) -> dict[str, Any]:
    """SB3 PPO with ``CnnPolicy`` at rl-zoo's Atari settings; steps/s after ``warmup`` rollouts."""
    import ale_py
    import gymnasium
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.utils import LinearSchedule
    from stable_baselines3.common.vec_env import VecFrameStack

    gymnasium.register_envs(ale_py)

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.marks: list[tuple[int, float]] = []

        def _on_rollout_start(self) -> None:
            self.marks.append((self.num_timesteps, time.perf_counter()))

        def _on_step(self) -> bool:
            return True

    env = VecFrameStack(make_atari_env(SB3_ENV_ID, n_envs=8, seed=seed), n_stack=4)
    model = PPO(
        "CnnPolicy",
        env,
        n_steps=128,
        n_epochs=4,
        batch_size=256,
        learning_rate=LinearSchedule(2.5e-4, 0.0, 1.0),
        clip_range=LinearSchedule(0.1, 0.0, 1.0),
        vf_coef=0.5,
        ent_coef=0.01,
        seed=seed,
        device="cpu",
    )
    clock = Clock()
    model.learn(total_timesteps=budget, callback=clock)
    end = (model.num_timesteps, time.perf_counter())
    (steps0, t0) = clock.marks[warmup]
    env.close()
    return {"framework": "SB3", "steps_per_s": (end[0] - steps0) / (end[1] - t0), "profile": {}}


CLEANRL: dict[str, str] = {}
"""``script`` and ``python``: CleanRL's ``ppo_atari_envpool.py`` and the interpreter of its own
environment (``--cleanrl``, ``--cleanrl-python``)."""


def run_cleanrl(budget: int, warmup: int, threads: int, seed: int) -> dict[str, Any]:
    """CleanRL's ``ppo_atari_envpool.py`` run as its own script on ``Pong-v5`` (its defaults are the
    shipped config's settings), in its own environment; steps/s after ``warmup`` iterations, from
    the cumulative ``SPS:`` line it prints after every iteration (step ``i x 1024`` at
    ``i x 1024 / SPS`` seconds)."""
    if not CLEANRL:
        raise SystemExit("atari_speed: error: the cleanrl framework needs --cleanrl SCRIPT (and --cleanrl-python)")
    command = [CLEANRL["python"], CLEANRL["script"], "--env-id", "Pong-v5", "--no-cuda", f"--seed={seed}"]
    command += [f"--total-timesteps={budget}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory(prefix="cleanrl-") as cwd:  # its runs/ folder of TensorBoard files
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    rates = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("SPS: ")]
    if done.returncode or len(rates) <= warmup:
        raise SystemExit(f"atari_speed: error: CleanRL's script failed (exit {done.returncode}): {done.stderr[-500:]}")
    batch = 8 * 128
    steps = [batch * (i + 1) for i in range(len(rates))]
    times = [step / rate for step, rate in zip(steps, rates)]
    rate = (steps[-1] - steps[warmup - 1]) / (times[-1] - times[warmup - 1]) if warmup else steps[-1] / times[-1]
    return {"framework": "CleanRL", "steps_per_s": rate, "profile": {}}


RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "msrl": run_msrl,
    "sb3": run_sb3,
    "cleanrl": run_cleanrl,
    "rllib": partial(run_rllib, "ppo"),
}
"""PPO at ``configs/ppo_atari.yaml``'s settings (the ``train`` section)."""
IMPALA_RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "msrl": run_msrl_impala,
    "rllib-impala": partial(run_rllib, "impala"),
    "rllib-appo": partial(run_rllib, "appo"),
    "sf": run_sample_factory,
}
"""IMPALA and its asynchronous kin at ``configs/impala_atari.yaml``'s batches (the ``impala`` section)."""


def training(
    budget: int,
    warmup: int,
    rounds: int,
    threads: int,
    frameworks: Sequence[str],
    runners: dict[str, Callable[..., dict[str, Any]]] = RUNNERS,
) -> list[dict[str, Any]]:
    unknown = sorted(set(frameworks) - set(runners))
    if unknown:
        raise SystemExit(f"atari_speed: error: unknown framework {unknown[0]!r}; valid: {', '.join(runners)}")
    torch.set_num_threads(threads)
    rows = []
    for round_ in range(rounds):
        for name in in_turn(list(frameworks), round_):
            row = runners[name](budget, warmup, threads, seed=round_ + 1)
            row["round"] = round_ + 1
            print(f"  round {round_ + 1} {row['framework']}: {row['steps_per_s']:.0f} agent steps/s", flush=True)
            rows.append(row)
    return rows


def training_table(rows: list[dict[str, Any]]) -> str:
    """One row per run; a peer's row carries msrl's rate over its own in the same round."""
    ours = {row["round"]: row["steps_per_s"] for row in rows if row["framework"] == "msrl"}
    table = []
    for row in rows:
        profile = row["profile"]
        parts = ("env", "inference", "buffer", "learn")
        shown = ", ".join(f"{part} {profile[part]:.2f}" for part in parts if part in profile)
        peer = row["framework"] != "msrl" and row["round"] in ours
        ratio = f"{ours[row['round']] / row['steps_per_s']:.2f}x" if peer else ""
        table.append([row["round"], row["framework"], f"{row['steps_per_s']:.0f}", ratio, shown or "-"])
    return markdown_table(
        ["round", "framework", "agent steps/s", "msrl / this (same round)", "ms per agent step"], table, "rlrrl"
    )


# -- environment stepping ---------------------------------------------------------------------------------
def env_stepping(steps: int, rounds: int, threads: int, num_envs: int = 8) -> str:
    """msrl's ``step`` against bare ``AtariVectorEnv`` (same options, same threads) and EnvPool."""
    from ale_py.vector_env import AtariVectorEnv

    import msrl.envs

    options = dict(repeat_action_probability=0.0, noop_max=30)
    bare = AtariVectorEnv(
        GAME, num_envs, num_threads=threads, autoreset_mode="SameStep", reward_clipping=False, **options
    )
    bare.reset(seed=0)
    ours = msrl.envs.make(ENV_ID, num_envs, seed=0, threads=threads, **options)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 6, num_envs) for _ in range(steps)]
    variants: dict[str, Any] = {
        "ale-py AtariVectorEnv": lambda: [bare.step(a) for a in actions],
        "msrl ALE/Pong-v5 (step)": lambda: [ours.step(a) for a in actions],
    }
    try:
        import envpool

        pool = envpool.make_gymnasium("Pong-v5", num_envs=num_envs, num_threads=threads, episodic_life=False)
        pool.reset()
        variants["EnvPool 1.2 Pong-v5"] = lambda: [pool.step(a) for a in actions]
    except ImportError:
        print("  envpool is not installed: its row is left out")
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(rounds):
        for name in in_turn(list(variants), round_):
            start = time.perf_counter()
            variants[name]()
            rates[name].append(steps * num_envs / (time.perf_counter() - start))
    bare_rates = rates["ale-py AtariVectorEnv"]
    rows = []
    for name, values in rates.items():
        ratios = [value / base for value, base in zip(values, bare_rates)]
        rows.append([name, f"{np.median(values):,.0f}", f"{min(ratios):.3f}-{max(ratios):.3f}"])
    return markdown_table(
        [f"{num_envs} games, {threads} threads", "agent steps/s (median)", "vs bare, per round"], rows, "lrr"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="env,train", help="env, train, impala (comma-separated)")
    parser.add_argument("--budget", type=int, default=10240, help="agent steps per training run")
    parser.add_argument("--warmup", type=int, default=2, help="iterations (rollouts) left out of the rate")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every framework")
    parser.add_argument("--threads", type=int, default=2, help="torch and emulator threads")
    parser.add_argument("--frameworks", default="msrl,sb3", help=f"PPO's: {', '.join(RUNNERS)}")
    parser.add_argument("--impala-frameworks", default="msrl,rllib-impala", help=f"{', '.join(IMPALA_RUNNERS)}")
    parser.add_argument("--impala-budget", type=int, default=40960, help="agent steps per IMPALA run")
    parser.add_argument("--impala-warmup", type=int, default=16, help="IMPALA iterations left out of the rate")
    parser.add_argument("--env-steps", type=int, default=3000, help="steps per environment-stepping round")
    parser.add_argument("--cleanrl", help="CleanRL's cleanrl/ppo_atari_envpool.py (for --frameworks ...,cleanrl)")
    parser.add_argument("--cleanrl-python", default="python", help="the interpreter of CleanRL's environment")
    parser.add_argument("--sample-factory-python", help="the interpreter of Sample Factory's environment (sf)")
    args = parser.parse_args(argv)
    if args.cleanrl:
        CLEANRL.update(script=str(Path(args.cleanrl).resolve()), python=args.cleanrl_python)
    if args.sample_factory_python:
        SAMPLE_FACTORY.update(python=args.sample_factory_python)
    sections = args.sections.split(",")
    print(command_line("benchmarks.atari_speed", argv))
    print(machine_info(("torch", "numpy", "gymnasium", "ale_py", "stable_baselines3")))
    if "env" in sections:
        print(env_stepping(args.env_steps, 3, args.threads))
    if "train" in sections:
        rows = training(args.budget, args.warmup, args.rounds, args.threads, args.frameworks.split(","))
        print(training_table(rows))
    if "impala" in sections:
        frameworks = args.impala_frameworks.split(",")
        rows = training(args.impala_budget, args.impala_warmup, args.rounds, args.threads, frameworks, IMPALA_RUNNERS)
        print(training_table(rows))


if __name__ == "__main__":
    main()
