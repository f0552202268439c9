"""How fast does msrl train, per env step, where SB3 has no counterpart and CleanRL's single-file
script is the peer?  C51 on CartPole-v1: msrl's ``dqn`` with its distributional head at CleanRL's
``c51.py`` settings against that script, run as its own process in its own environment, rounds
interleaved, one torch thread each.

msrl runs ``configs/dqn_cartpole.yaml`` (CleanRL's DQN settings, which ``c51.py`` shares: a 10k
buffer, learning from 10k, batch 128, Adam 2.5e-4, one gradient step per 10 env steps, the target
copied every 500 env steps, epsilon 1 to 0.05 over half the run, a [120, 84] torso) with
``algo.distributional=true`` and ``c51.py``'s 101 atoms on [-100, 100].  Both rates are whole-run
env steps per second after construction: msrl's from its first iteration to its last (one
iteration at a time through ``msrl.app.Trainer``, the compiled steps loaded from the cache or built
meanwhile), CleanRL's its final cumulative ``SPS:`` line (steps over the seconds since its loop
began).  What differs besides the frameworks: msrl steps 10 environments 10 times and then takes 10
gradient steps (``dqn_cartpole.yaml`` says why); ``c51.py`` steps one and takes a gradient step
every 10.

    git clone https://github.com/vwxyzjn/cleanrl ../cleanrl
    python -m venv ../cleanrl-venv   # its own environment: c51.py reads gymnasium 0.29's final_observation
    ../cleanrl-venv/bin/pip install torch gymnasium==0.29.1 "numpy<2" tyro tensorboard
    python -m benchmarks.cleanrl_speed --budget 50000 --rounds 3 \\
        --cleanrl ../cleanrl/cleanrl/c51.py --cleanrl-python ../cleanrl-venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, command_line, in_turn, machine_info, markdown_table

CONFIG = REPO / "configs" / "dqn_cartpole.yaml"
C51 = ["algo.distributional=true", "algo.atoms=101", "algo.v_min=-100", "algo.v_max=100"]
"""``c51.py``'s head: 101 atoms on [-100, 100]."""


def run_msrl(budget: int, seed: int) -> dict[str, Any]:
    """msrl's C51 under ``local``, one iteration at a time; env steps/s from the first iteration on."""
    from msrl.app import Trainer

    with tempfile.TemporaryDirectory(prefix="msrl-c51-") as runs_dir:
        overrides = ["policy=local", "progress=false", "eval_episodes=0", "checkpoint_every=0"]
        overrides += [f"runs_dir={runs_dir}", f"seed={seed}", f"total_env_steps={budget}", *C51]
        trainer = Trainer(str(CONFIG), overrides)
        phases: dict[str, float] = {}
        try:
            start, steps = time.perf_counter(), 0
            while not trainer.done:
                step = trainer.step()
                steps = step["env_steps"]
                for key, value in step.items():
                    if key.startswith("time_") and "/" not in key:
                        phases[key[5:]] = phases.get(key[5:], 0.0) + value
            seconds = time.perf_counter() - start
        finally:
            trainer.close()
    profile = {name: 1e6 * value / steps for name, value in phases.items()}
    return {"framework": "msrl", "steps_per_s": steps / seconds, "profile": profile}


def run_cleanrl(budget: int, seed: int, script: str, python: str) -> dict[str, Any]:
    """CleanRL's ``c51.py`` on CartPole-v1 at its defaults, as its own process; its last ``SPS:``."""
    command = [python, script, "--env-id", "CartPole-v1", "--no-cuda", f"--seed={seed}", f"--total-timesteps={budget}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    root = str(Path(script).resolve().parent.parent)  # its cleanrl_utils, as CleanRL's own runs import it
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory(prefix="cleanrl-") as cwd:  # its runs/ folder of TensorBoard files
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    rates = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("SPS: ")]
    if done.returncode or not rates:
        failure = f"exit {done.returncode}: {done.stderr[-500:]}"
        raise SystemExit(f"cleanrl_speed: error: CleanRL's script failed ({failure})")
    return {"framework": "CleanRL", "steps_per_s": float(rates[-1]), "profile": {}}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cleanrl_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=50_000, help="env steps per run (default 50000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, seeds 1.. (default 3)")
    parser.add_argument("--cleanrl", required=True, help="CleanRL's cleanrl/c51.py")
    parser.add_argument("--cleanrl-python", default=sys.executable, help="the interpreter of CleanRL's environment")
    args = parser.parse_args(argv)
    if args.budget < 20_000:
        parser.error("--budget must be >= 20000: both learn from the 10,000th step on")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if not Path(args.cleanrl).is_file():
        parser.error(f"--cleanrl: no such file {args.cleanrl}")
    if os.sep in args.cleanrl_python:  # a path: it runs from a scratch folder
        args.cleanrl_python = os.path.abspath(args.cleanrl_python)
    args.cleanrl = os.path.abspath(args.cleanrl)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(1)
    runners = {
        "msrl": lambda seed: run_msrl(args.budget, seed),
        "CleanRL": lambda seed: run_cleanrl(args.budget, seed, args.cleanrl, args.cleanrl_python),
    }
    rows = []
    for round_ in range(args.rounds):
        results = {name: runners[name](round_ + 1) for name in in_turn(list(runners), round_)}
        ratio = results["msrl"]["steps_per_s"] / results["CleanRL"]["steps_per_s"]
        profile = ", ".join(f"{k} {v:.0f}" for k, v in sorted(results["msrl"]["profile"].items()))
        for name in runners:
            rate = results[name]["steps_per_s"]
            ours = name == "msrl"
            rows.append([round_ + 1, name, f"{rate:,.0f}", f"{ratio:.2f}x" if ours else "", profile if ours else ""])
            print(f"round {round_ + 1}: {name} {rate:,.0f} env steps/s", flush=True)
    ratios = [float(row[3][:-1]) for row in rows if row[3]]
    print()
    print(command_line("benchmarks.cleanrl_speed", argv))
    print(machine_info(note="one torch thread each"))
    header = ["round", "framework", "env steps/s", "msrl / CleanRL", "msrl's profile, us per env step"]
    print(markdown_table(header, rows))
    per_round = ", ".join(f"{r:.2f}x" for r in ratios)
    print(f"\nmsrl / CleanRL per round: {per_round}; median {statistics.median(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
