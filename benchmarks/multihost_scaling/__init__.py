"""How do the presets scale across hosts?  Every Ray preset across hosts on shaped links, and the
scaling model of docs/scaling.md fitted on the measured runs (``--report``).

A testbed of ``--hosts`` hosts (network namespaces on a bridge, each its own Ray node with
``--cpus`` CPUs: ``testbed``) trains PPO CartPole (configs/ppo_cartpole.yaml, or ``--config``:
configs/ppo_atari.yaml for 84x84x4 frames) for ``--iterations`` iterations (2048 env steps each
for CartPole) under every Ray preset, with a placement that spreads
the replicas (SPREAD; STRICT_SPREAD for multi_learner; gpu_only has one fragment), with every host's
link shaped to each profile in turn (both ends of the host's veth pair, both ways: the testbed's
``shape``: tc netem where the kernel has netem; else the testbed's relay for the delay,
testbed/_delay.py, and a token bucket, tc tbf, for the rate, its bucket set by ``--burst``;
``--no-delay`` gives the rate alone, as in the runs docs/scaling.md fits its model on).

Per preset x profile it reports, over the steady iterations (the first one, with worker start-up,
left out): env steps/s; the iteration's wall time split into compute (the fragments' env,
inference, learn and buffer phases on the critical path: summed over fragments for the synchronous
presets, whose fragments take turns; the slower fragment's for async_single_learner, whose
fragments overlap) and communication (the rest: transfers, serialisation, waiting on Ray); and the
bytes and packets each host's ``eth0`` moved per iteration, read from the kernel's counters inside
each host at the end of every iteration, idle traffic subtracted (``_bed.py`` here).

Every host shares this machine's cores, so compute is contended and inflated; the split and the
bytes are what carry over to real hosts.  Presets run one after another, each with its profiles
back to back in an order rotated per preset (reversed in a second round), so drift of the shared
machine falls on every profile alike.

    python -m benchmarks.multihost_scaling --replicas 2 4      # as root: 3 hosts, every preset and profile
    python -m benchmarks.multihost_scaling --hosts 2 --profiles none 100mbit-2ms --burst 3028
    python -m benchmarks.multihost_scaling --report            # the scaling model (docs/scaling.md)
    python -m benchmarks.multihost_scaling --config configs/ppo_atari.yaml --iterations 4 \
        --presets single_learner_coarse single_learner_fine multi_learner async_single_learner \
        --profiles none 1gbit-0.5ms --set algo.compile=false      # frames: results in hosts3-ppo_atari.*
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import os
import platform
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, command_line
from benchmarks.multihost_scaling._bed import (
    CONFIG,
    PROFILES,
    Run,
    apply_profile,
    run_name,
    steps_per_iteration,
    timed_run,
)
from benchmarks.multihost_scaling._report import report
from testbed import Testbed, TestbedError, netem_missing, unavailable

PRESETS = {  # the Ray presets, spread over the hosts
    "single_learner_coarse": ["policy=single_learner_coarse", "policy.placement=SPREAD"],
    "single_learner_fine": ["policy=single_learner_fine", "policy.placement=SPREAD"],
    "multi_learner": ["policy=multi_learner"],  # STRICT_SPREAD where every replica gets a host of its own
    "async_single_learner": ["policy=async_single_learner", "policy.placement=SPREAD"],
    "gpu_only": ["policy=gpu_only", "policy.device=cpu"],  # one fragment: nothing to spread
}
REPLICAS = {  # the parameter that sets a preset's replica count (num_envs 64 is split evenly over them)
    "single_learner_coarse": "actors",
    "single_learner_fine": "envs",
    "multi_learner": "learners",
    "async_single_learner": "actors",
}


def overrides(preset: str, replicas: int, hosts: int) -> list[str]:
    extra = [f"policy.{REPLICAS[preset]}={replicas}"] if preset in REPLICAS else []
    if preset == "multi_learner":
        extra.append(f"policy.placement={'STRICT_SPREAD' if replicas <= hosts else 'SPREAD'}")
    return [*PRESETS[preset], *extra]


COMPUTE = ("time_env", "time_inference", "time_learn", "time_buffer")
OUT = REPO / "benchmarks" / "results" / "multihost"


def schedule(presets: list[str], replicas: list[int], profiles: list[str], rounds: int) -> list[tuple[str, int, str]]:
    """Each preset's profiles back to back, rotated by the preset's position; round 2 reversed."""
    order = []
    cases = [(p, r) for r in replicas for p in presets if r == replicas[0] or p in REPLICAS]
    for i, (preset, count) in enumerate(cases):
        k = i % len(profiles)
        order += [(preset, count, profile) for profile in profiles[k:] + profiles[:k]]
    return [case for r in range(rounds) for case in (order if r % 2 == 0 else order[::-1])]


def split(summary: dict[str, Any]) -> tuple[float, float]:
    """(compute, communication) seconds of a steady iteration: see the module's docstring."""
    fragments = summary["fragments"]
    per_fragment = [sum(phases.get(k, 0.0) for k in COMPUTE) for phases in fragments.values()]
    if not per_fragment:  # one fragment: its phases are the run's
        per_fragment = [sum(summary.get(k, 0.0) for k in COMPUTE)]
    compute = max(per_fragment) if summary["preset"] == "async_single_learner" else sum(per_fragment)
    return compute, max(summary["iteration_s"] - compute, 0.0)


def fragment_phases(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    steady = records[1:]
    out: dict[str, dict[str, float]] = {}
    for key in {k for r in steady for k in r if k.startswith("time_") and "/" in k}:
        phase, fragment = key.split("/", 1)
        out.setdefault(fragment, {})[phase] = sum(r.get(key, 0.0) for r in steady) / len(steady)
    return out


def row(run: Run) -> dict[str, Any]:
    summary = run.summary()
    summary["fragments"] = fragment_phases(run.records)
    compute, comm = split(summary)
    summary.update(compute_s=compute, communication_s=comm)
    return summary


def link(profile: str, delay_applied: bool) -> str:
    return profile if delay_applied or profile == "none" else f"{profile.split('-')[0]} (no delay)"


def table(rows: list[dict[str, Any]], hosts: int, delay_applied: bool) -> str:
    heads = ["preset", "replicas", "link", "env steps/s", "iteration ms", "compute ms", "comm. ms", "comm. %"]
    heads += [f"h{h} rx/tx kB" for h in range(hosts)] + ["packets"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(heads) - 3)) + "|"]
    for r in rows:
        cells = [
            r["preset"],
            str(r["replicas"]),
            link(r["profile"], delay_applied),
            f"{r['steps_per_s']:.0f}",
            f"{1e3 * r['iteration_s']:.0f}",
        ]
        cells += [f"{1e3 * r['compute_s']:.0f}", f"{1e3 * r['communication_s']:.0f}"]
        cells += [f"{100 * r['communication_s'] / r['iteration_s']:.0f}"]
        cells += [f"{h['rx_bytes'] / 1e3:.0f} / {h['tx_bytes'] / 1e3:.0f}" for h in r["per_host"]]
        cells += [f"{sum(h['rx_packets'] + h['tx_packets'] for h in r['per_host']) / 2:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / (f"hosts{meta['hosts']}" + (f"-burst{meta['tbf_burst']}" if meta["tbf_burst"] else ""))
    if meta["config"] != run_name(CONFIG):  # another workload's results beside the model's CartPole ones
        stem = stem.with_name(f"{stem.name}-{meta['config']}")
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    with stem.with_suffix(".csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["preset", "replicas", "profile", "hosts", "steps_per_s", "iteration_s", "compute_s", "communication_s"]
            + [f"h{h}_{k}" for h in range(meta["hosts"]) for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")]
        )
        for r in rows:
            cells = [
                r["preset"],
                r["replicas"],
                r["profile"],
                r["hosts"],
                r["steps_per_s"],
                r["iteration_s"],
                r["compute_s"],
            ]
            cells += [r["communication_s"]] + [
                h[k] for h in r["per_host"] for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
            ]
            w.writerow([f"{c:.6g}" if isinstance(c, float) else c for c in cells])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs each host gives Ray")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    parser.add_argument("--config", default=CONFIG, help="the on-policy config every run trains")
    parser.add_argument("--set", action="append", default=[], help="a config override for every run (KEY=VALUE)")
    parser.add_argument("--iterations", type=int, default=10, help="iterations per run")
    parser.add_argument(
        "--replicas", nargs="+", type=int, default=[2], help="replica counts (gpu_only runs at the first)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="times through every preset x profile")
    parser.add_argument("--idle-s", type=float, default=5.0, help="idle window before each run, for the idle rate")
    parser.add_argument("--burst", type=int, default=0, help="tc tbf bucket in bytes (0: 1 ms of the rate, >= 64 KiB)")
    parser.add_argument("--no-delay", action="store_true", help="the profiles' rates alone (tc tbf), no delay")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report", action="store_true", help="no runs: fit the scaling model on --out's results")
    args = parser.parse_args(argv)
    if args.report:
        if not any(args.out.glob("hosts*.json")):
            print(f"multihost_scaling: error: no runs in {args.out} (hosts*.json)", file=sys.stderr)
            return 2
        print(report(args.out))
        return 0
    why_not = unavailable()
    if why_not:
        print(f"multihost: error: no testbed here: {why_not}", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # a SIGTERM ends the benchmark as Ctrl-C does: through the testbed's teardown, not around it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs: list[Run] = []
    no_netem = netem_missing()
    delayed = not args.no_delay
    if no_netem and delayed:
        print(f"multihost: the delay from the testbed's relay (testbed/_delay.py), the rate from tc tbf: {no_netem}")
    delay_by = ("relay" if no_netem else "netem") if delayed else None
    meta = {**_meta(args, argv), "delay_applied": delayed, "delay_by": delay_by, "no_netem": no_netem}
    with started(args.hosts, args.cpus) as bed, tempfile.TemporaryDirectory(prefix="msrl-mh-") as tmp:
        for n, (preset, count, profile) in enumerate(schedule(args.presets, args.replicas, args.profiles, args.rounds)):
            apply_profile(bed, profile, delay=delayed, burst=args.burst)
            count = count if preset in REPLICAS else 1
            run = timed_run(
                bed,
                Run(preset, profile, args.hosts, count),
                [*overrides(preset, count, args.hosts), *args.set],
                args.iterations * steps_per_iteration(args.config, args.set),
                Path(tmp) / f"run{n}",
                args.idle_s,
                args.config,
            )
            if run.returncode or len(run.samples) < 2:
                print(
                    f"multihost: {preset} x{count} on {profile} failed (exit {run.returncode}): {run.error}",
                    file=sys.stderr,
                )
                continue
            runs.append(run)
            r = row(run)
            print(
                f"{preset:22s} x{count} {profile:13s} {r['steps_per_s']:6.0f} steps/s"
                f" {1e3 * r['iteration_s']:5.0f} ms/it",
                flush=True,
            )
            write(ordered(runs), meta, args.out)  # after every run: a stopped benchmark keeps what it measured
    rows = ordered(runs)
    print(table(rows, args.hosts, delayed))
    return 0


@contextlib.contextmanager
def started(hosts: int, cpus: int, attempts: int = 3) -> Iterator[Testbed]:
    """A testbed that is up (Ray on a busy machine may miss its start-up timeout: tried again), and
    down again whatever happens."""
    for attempt in range(1, attempts + 1):
        bed = Testbed(hosts=hosts, cpus=cpus)
        try:
            bed.up(timeout_s=240)
            break
        except TestbedError as exc:
            bed.down()
            if attempt == attempts:
                raise
            print(f"multihost: testbed start {attempt} failed, trying again: {str(exc)[:200]}", file=sys.stderr)
    try:
        yield bed
    finally:
        bed.down()


def ordered(runs: list[Run]) -> list[dict[str, Any]]:
    rank = {name: i for i, name in enumerate([*PRESETS, *PROFILES])}
    return sorted((row(r) for r in runs), key=lambda r: (rank[r["preset"]], r["replicas"], rank[r["profile"]]))


def _meta(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    return {
        "hosts": args.hosts,
        "config": run_name(args.config),
        "overrides": list(args.set),
        "cpus_per_host": args.cpus,
        "iterations": args.iterations,
        "rounds": args.rounds,
        "tbf_burst": args.burst,
        "started_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {os.cpu_count()} cores (shared by every host and other work)",
        "command": command_line("benchmarks.multihost_scaling", argv),
    }
