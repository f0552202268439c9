"""Ape-X DQN across hosts: wall-clock to a CartPole-v1 training return of 475 with 4 actors spread
over 2 and over 3 testbed hosts (network namespaces, each its own Ray node: ``testbed``), beside DQN
(``configs/dqn_cartpole.yaml``, in one process) run on this machine in the same invocation.

Ape-X runs ``configs/apex_dqn_cartpole.yaml`` under ``single_learner_coarse`` with 4 actors (each
holding its replay shard) and SPREAD placement, joined to the testbed's head; the learner sends each
shard the priorities of the rows it sampled.  The time to 475 is when the mean of the last 10
training episodes first reaches it (``msrl.app.gate``'s rule, on the iterations' summed wall time).
Every host shares this machine's cores, so the hosts' compute is contended; run as root.

    python -m benchmarks.apex_hosts                       # 2 and 3 hosts, then DQN
    python -m benchmarks.apex_hosts --hosts 2 --seeds 1 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import REPO, command_line, machine_info, markdown_table
from msrl.app import Run
from msrl.app.gate import TrainingRecord, record_of, train_and_record
from testbed import Testbed

APEX = REPO / "configs" / "apex_dqn_cartpole.yaml"
DQN = REPO / "configs" / "dqn_cartpole.yaml"
THRESHOLD = 475.0
CPUS = 6
"""Logical CPUs over all hosts: 4 actors and the learner, one each, and one to spare."""


def apex_on_hosts(hosts: int, seed: int, steps: int, runs: Path) -> dict:
    """One Ape-X run with 4 actors spread over ``hosts`` testbed hosts."""
    sets = [
        f"seed={seed}",
        f"total_env_steps={steps}",
        f"runs_dir={runs}",
        "eval_episodes=20",
        "progress=false",
        "checkpoint_every=0",
        "policy=single_learner_coarse",
        "policy.actors=4",
        "policy.placement=SPREAD",
    ]
    with Testbed(hosts=hosts, cpus=-(-CPUS // hosts)) as bed:
        argv = [sys.executable, "-m", "msrl", "train", str(APEX), "--address", bed.head_address]
        done = bed.run(0, [*argv, *(a for s in sets for a in ("--set", s))], cwd=str(REPO), timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"apex_hosts: error: the run on {hosts} hosts failed:\n{(done.stdout + done.stderr)[-3000:]}")
    run_dir = runs / "apex_dqn_cartpole"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluation = json.loads((run_dir / "eval.json").read_text())
    last = metrics[-1]
    run = Run(str(run_dir), metrics, None, int(last["iteration"]), int(last["env_steps"]), 0.0)
    record = record_of(run, "apex_dqn_cartpole", seed)
    return _row(f"apex_dqn, 4 actors on {hosts} hosts", seed, record, float(evaluation["mean"]))


def dqn_here(seed: int, runs: Path) -> dict:
    record, run = train_and_record(DQN, seed, 500_000, 20, runs)
    assert run.evaluation is not None
    return _row("dqn, one process", seed, record, float(run.evaluation.mean))


def _row(name: str, seed: int, record: TrainingRecord, greedy: float) -> dict:
    point = record.reached(THRESHOLD)
    return {
        "run": name,
        "seed": seed,
        "env_steps": record.env_steps,
        "greedy": greedy,
        "steps_to_475": point.env_steps if point else None,
        "seconds_to_475": round(point.wall_seconds, 1) if point else None,
        "wall_seconds": round(record.episodes[-1].wall_seconds, 1) if record.episodes else None,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 3], help="testbed sizes (default 2 3)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="seeds (default 1)")
    parser.add_argument("--steps", type=int, default=200_000, help="Ape-X's env steps (default 200,000)")
    parser.add_argument("--no-dqn", action="store_true", help="leave out the DQN run")
    parser.add_argument("--out", type=Path, default=None, help="write the rows here as JSON lines")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="apex-hosts-") as scratch:
        for seed in args.seeds:
            for hosts in args.hosts:
                rows.append(apex_on_hosts(hosts, seed, args.steps, Path(scratch) / f"h{hosts}-s{seed}"))
                print(rows[-1], flush=True)
            if not args.no_dqn:
                rows.append(dqn_here(seed, Path(scratch) / f"dqn-s{seed}"))
                print(rows[-1], flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    header = list(rows[0])
    print(markdown_table(header, [[row[key] for key in header] for row in rows]))
    print(f"`{command_line('benchmarks.apex_hosts', argv)}` -- {machine_info()}")


if __name__ == "__main__":
    main()
