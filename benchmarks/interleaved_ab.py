"""Interleaved A/B of one benchmark command in two checkouts (before and after a change).

This VM's speed drifts 10-50% within minutes, so two figures taken minutes apart
compare nothing.  This runs the same command in checkout A and checkout B in
alternating order (A B, B A, A B, ...), pulls one figure out of each run's output
with a regular expression, and prints every pair, each pair's B/A ratio and their
geometric mean.  Each checkout runs on its own code (``PYTHONPATH`` is its root);
both use this interpreter.

    git worktree add ../before <commit>
    python benchmarks/interleaved_ab.py --a ../before --b . --pairs 8 \\
        --figure '\\| msrl \\| 1 \\| [\\d,]+ \\| ([\\d,]+)' -- \\
        benchmarks/ppo_cartpole.py --skip-sb3 --budget 150000 --seeds 1 --eval-every 1000000

``--a-args`` / ``--b-args`` append arguments to one side's command only (the same code run two
ways, or an eager A against a compiled B):

    python benchmarks/interleaved_ab.py --a ../before --b . --figure 'train_s ([\\d.]+)' \
        --a-args '--set algo.compile=false' --b-args '--set algo.compile=true' -- \
        benchmarks/train_time.py configs/a2c_cartpole.yaml --set total_env_steps=40000
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys


def figure(root: str, command: list[str], pattern: re.Pattern[str]) -> float:
    """Run ``command`` in checkout ``root``; the number its output's first ``pattern`` match captures."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(root)}
    done = subprocess.run([sys.executable, *command], cwd=root, env=env, capture_output=True, text=True)
    found = pattern.search(done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(
            f"interleaved_ab: error: {command[0]} in {root} exited {done.returncode} "
            f"{'without a match for --figure' if found is None else ''}: {done.stderr.strip()[-500:]}"
        )
    return float(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="checkout A (before)")
    parser.add_argument("--b", required=True, help="checkout B (after)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--figure", required=True, help="regular expression whose group 1 is the figure")
    parser.add_argument("--a-args", default="", help="arguments appended to A's command only (shell-quoted)")
    parser.add_argument("--b-args", default="", help="arguments appended to B's command only (shell-quoted)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- script and arguments, run in both checkouts")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    pattern = re.compile(args.figure, re.M)
    ratios = []
    print("| pair | order | A | B | B/A |\n|---:|---|---:|---:|---:|")
    for pair in range(args.pairs):
        order = "AB" if pair % 2 == 0 else "BA"
        extra = {"A": shlex.split(args.a_args), "B": shlex.split(args.b_args)}
        got = {side: figure(args.a if side == "A" else args.b, command + extra[side], pattern) for side in order}
        ratios.append(got["B"] / got["A"])
        print(f"| {pair} | {order} | {got['A']:,.0f} | {got['B']:,.0f} | {ratios[-1]:.3f} |", flush=True)
    print(
        f"\nB/A: geometric mean {statistics.geometric_mean(ratios):.3f}, median {statistics.median(ratios):.3f}, "
        f"range {min(ratios):.3f}-{max(ratios):.3f} over {args.pairs} pairs"
    )


if __name__ == "__main__":
    main()
