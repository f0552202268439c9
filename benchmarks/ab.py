"""Is checkout B faster than checkout A?  One benchmark command run in both (before and after a
change), interleaved: A B, B A, A B, ...  (``benchmarks.harness.interleave``'s order), one figure
pulled out of each run's output with a regular expression, every pair printed with its B/A ratio,
then their geometric mean.  Each checkout runs on its own code (``PYTHONPATH`` is its root, the
command runs there); both use this interpreter.

    git worktree add ../before <commit>
    python -m benchmarks.ab --a ../before --b . --pairs 8 \\
        --figure '\\| msrl \\| 1 \\| [\\d,]+ \\| ([\\d,]+)' -- \\
        -m benchmarks.training_speed --skip-sb3 --budget 150000 --seeds 1 --eval-every 1000000

``--train CONFIG`` times one config's whole training run instead (``msrl.train``'s own training
clock, ``Run.wall_time``: every iteration with its metrics record, TensorBoard event and checkpoints;
start-up and the final evaluation excluded), through msrl's public API alone, so that a checkout
from before this script existed runs it too; the words after ``--`` are overrides.  The figure is
``train_s``, to the tenth of a millisecond.  With ``algo.compile: true`` the first iteration builds
or loads the compiled steps: run once beforehand, so that they load from the cache in milliseconds.
``--a-args`` / ``--b-args`` append arguments to one side's command only (the same code run two
ways, or an eager A against a compiled B):

    python -m benchmarks.ab --a ../before --b . --train configs/a2c_cartpole.yaml \\
        --a-args 'algo.compile=false' --b-args 'algo.compile=true' -- total_env_steps=40000

``--cold-cache`` gives every run an empty compiled-step cache (a first run on a fresh machine:
with ``algo.compile: auto`` its steps build in the background while it trains eagerly), and a
``--train`` run then waits for the builds it started before the next run begins, so that each
run has the machine to itself and its own builds only.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

from benchmarks.harness import in_turn, table_head, table_row

TRAIN = """
import io, sys, tempfile, warnings
import msrl
warnings.filterwarnings("ignore")  # torch's deprecation notes would interleave with the figure
config, *sets = sys.argv[1:]
with tempfile.TemporaryDirectory() as runs:
    overrides = ["progress=false", "eval_episodes=0", f"runs_dir={runs}", *sets]
    run = msrl.train(config, overrides, stream=io.StringIO())
greedy = f" greedy_return {run.evaluation.mean:.1f}" if run.evaluation is not None else ""
per_step = run.wall_time / max(1, run.env_steps) * 1e6
print(f"train_s {run.wall_time:.4f} env_steps {run.env_steps} us_per_env_step {per_step:.2f}{greedy}", flush=True)
try:  # the compiled steps this run left building: waited for, so the next run starts on a quiet machine
    from msrl.rl import wait_for_builds
except ImportError:  # a checkout whose compiled steps never build in the background
    pass
else:
    wait_for_builds()
"""
"""What ``--train`` runs in each checkout: prints ``train_s S env_steps N us_per_env_step U`` (and the
greedy return with ``eval_episodes=N`` among the overrides)."""


def figure(root: str, command: list[str], pattern: re.Pattern[str], cold_cache: bool = False) -> float:
    """Run ``command`` in checkout ``root``; the number its output's first ``pattern`` match captures.
    ``cold_cache``: with a compiled-step cache of its own, empty, removed afterwards."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(root)}
    with tempfile.TemporaryDirectory(prefix="msrl-ab-cache-") as cache:
        if cold_cache:
            env["TORCHINDUCTOR_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, *command], cwd=root, env=env, capture_output=True, text=True)
    found = pattern.search(done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(
            f"ab: error: {shlex.join(command[:3])} in {root} exited {done.returncode} "
            f"{'without a match for --figure' if found is None else ''}: {done.stderr.strip()[-500:]}"
        )
    return float(found.group(1).replace(",", ""))


def shown(value: float) -> str:
    """A figure as the table gives it: whole with thousands separated, or four significant digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="checkout A (before)")
    parser.add_argument("--b", required=True, help="checkout B (after)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--figure", help="regular expression whose group 1 is the figure (--train: train_s)")
    parser.add_argument("--train", metavar="CONFIG", help="time msrl.train on this config; overrides after --")
    parser.add_argument("--a-args", default="", help="arguments appended to A's command only (shell-quoted)")
    parser.add_argument("--b-args", default="", help="arguments appended to B's command only (shell-quoted)")
    parser.add_argument("--cold-cache", action="store_true", help="every run with an empty compiled-step cache")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the python arguments run in both checkouts")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.train:
        command = ["-c", TRAIN, args.train, *command]
        args.figure = args.figure or r"train_s ([\d.]+)"
    if not command:
        parser.error("give the command after -- (or --train CONFIG)")
    if not args.figure:
        parser.error("--figure is needed unless --train")
    pattern = re.compile(args.figure, re.M)
    extra = {"A": shlex.split(args.a_args), "B": shlex.split(args.b_args)}
    ratios = []
    print(table_head(["pair", "order", "A", "B", "B/A"], "rlrrr"))
    for pair in range(args.pairs):
        order = in_turn(["A", "B"], pair)
        got = {
            side: figure(args.a if side == "A" else args.b, command + extra[side], pattern, args.cold_cache)
            for side in order
        }
        ratios.append(got["B"] / got["A"])
        print(table_row([pair, "".join(order), shown(got["A"]), shown(got["B"]), f"{ratios[-1]:.3f}"]), flush=True)
    print(
        f"\nB/A: geometric mean {statistics.geometric_mean(ratios):.3f}, median {statistics.median(ratios):.3f}, "
        f"range {min(ratios):.3f}-{max(ratios):.3f} over {args.pairs} pairs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
