"""How well does the cost model predict each preset, and does ``policy: auto`` pick the fastest?

For each workload: a calibration of the unsplit run (what ``msrl plan`` measures), then every
preset measured by ``msrl compare`` on the same machine one after another, eager as the calibration
(``algo.compile: false``: no compiled step builds in the background of a run), then the calibration
again, averaged with the first (the VM drifts); the records (the calibration and each run's steady iteration)
go to ``benchmarks/figures/plan/<cluster>.jsonl``.
``--report`` predicts every row again from the stored calibrations with the constants given (the
defaults: ``fragments.CostConstants()``), so a refit needs no new runs, and prints the matrix:
predicted beside measured, the error, which term the model got wrong, and per workload whether
the plan's first row measured within 10% of the fastest.  ``--fit`` searches the transport
constants that minimise the median error over the stored rows.

    python -m benchmarks.plan_accuracy                      # measure every workload here
    python -m benchmarks.plan_accuracy --workloads ppo_cartpole,ippo_simple_tag
    python -m benchmarks.plan_accuracy --report [--fit]
    python -m benchmarks.plan_accuracy --holdout              # fitted on the other workloads
    python -m benchmarks.plan_accuracy --testbed benchmarks/figures/plan/hosts3-ppo_cartpole.json
    python -m benchmarks.plan_accuracy --testbed FILE --workloads ippo_simple_tag
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import fragments
import policies
from msrl.app import compare, hypothetical_cluster, load_config, plan, read_metrics, this_machine
from msrl.core import ConfigError

RESULTS = Path(__file__).parent / "figures" / "plan"
"""The records, kept in the repository: ``--report`` and ``--fit`` need no new runs."""
PRESETS = {
    "local": {"preset": "local"},
    "single_learner_coarse": {"preset": "single_learner_coarse", "actors": 2},
    "single_learner_fine": {"preset": "single_learner_fine", "envs": 2},
    "multi_learner": {"preset": "multi_learner", "learners": 2},
    "async_single_learner": {"preset": "async_single_learner", "actors": 2},
}
"""Each preset at its default replica count, named as ``msrl compare`` names its rows."""


@dataclasses.dataclass(frozen=True)
class Workload:
    config: str
    overrides: tuple[str, ...] = ()
    iterations: int = 25
    """Iterations per measured run (the first is left out of the steady rate)."""
    needs: str = ""
    """A module the workload needs; without it the row says so."""


WORKLOADS = {
    "ppo_cartpole": Workload("configs/ppo_cartpole.yaml", iterations=100),
    "ppo_halfcheetah": Workload(
        "configs/ppo_halfcheetah.yaml", ("algo.num_envs=4", "algo.num_steps=128"), iterations=12, needs="mujoco"
    ),
    "sac_pendulum": Workload("configs/sac_pendulum.yaml", ("algo.num_envs=4", "algo.learning_starts=400"), 200),
    "mappo_simple_spread": Workload("configs/mappo_simple_spread.yaml", iterations=12),
    "ippo_simple_tag": Workload(
        "configs/ippo_tag.yaml",
        (
            "algo.env_id=pettingzoo:mpe2.simple_tag_v3",
            "algo.env_kwargs={}",
            "algo.policies={adversary: adv, agent: ag}",
        ),
        iterations=12,
    ),
    "ppo_atari": Workload("configs/ppo_atari.yaml", iterations=8, needs="ale_py"),
}
"""The matrix's workloads: issue-sized versions of the shipped configs (HalfCheetah as ``msrl
compare`` ran it, SAC with 4 environments so that replicas can split them, IPPO on PettingZoo's
own simple_tag, stepped in Python: the environment-bound case)."""


def _missing(module: str) -> str | None:
    if not module:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"needs {module} (pip install -e '.[{'mujoco' if module == 'mujoco' else 'atari'}]')"
    return None


def measure(name: str, workload: Workload, out: Path) -> None:
    """Calibrate the workload, then run every preset under ``msrl compare``; append the records."""
    why = _missing(workload.needs)
    if why:
        _append(out, {"workload": name, "skipped": why})
        print(f"{name}: skipped, {why}")
        return
    overrides = [*workload.overrides, "algo.compile=false"]  # eager, as the calibration measures
    config = load_config(workload.config, overrides)
    from msrl.app import calibrate_run

    started = time.perf_counter()
    try:
        calibration = calibrate_run(config, budget_s=900.0)  # builds of the compiled steps included
    except ConfigError as exc:
        _append(out, {"workload": name, "skipped": str(exc)})
        print(f"{name}: skipped, {exc}")
        return
    print(f"{name}: calibrated in {time.perf_counter() - started:.1f} s ({calibration.iteration_s * 1e3:.1f} ms/iter)")
    warmup = int(getattr(config.algo, "learning_starts", 0) or 0)  # before it, an off-policy learner idles
    budget = warmup + calibration.env_steps * workload.iterations
    runs = Path("runs") / "plan_accuracy"  # the runs themselves: msrl compare's directories, not kept
    result = compare(
        workload.config,
        list(PRESETS),
        overrides=[*overrides, f"runs_dir={runs}", "eval_episodes=0", "checkpoint_every=0"],
        budget=budget,
        name=f"plan-{name}-{time.strftime('%Y%m%d%H%M%S')}",
    )
    measured = {row["label"]: steady(Path(result.out_dir) / row["run_dir"], warmup) for row in result.rows}
    try:  # once more after the runs: this VM drifts 10-50% within minutes, so the two are averaged
        after = calibrate_run(config, budget_s=900.0)
    except ConfigError as exc:
        print(f"{name}: the second calibration failed ({exc}); the first stands alone")
    else:
        calibration = mean_calibration(calibration, after)
    _append(
        out,
        {
            "workload": name,
            "config": workload.config,
            "overrides": overrides,
            "date": time.strftime("%Y-%m-%d"),
            "calibration": dataclasses.asdict(calibration),
            "measured": {
                label: {"seconds_per_iteration": seconds, "env_steps_per_s": calibration.env_steps / seconds}
                for label, seconds in measured.items()
            },
        },
    )


def steady(run_dir: Path, warmup: int) -> float:
    """A run's mean seconds an iteration once its learner learns (past ``warmup`` env steps), its
    first iteration left out in any case (start-up)."""
    records = read_metrics(run_dir)[1:]
    learning = [r for r in records if int(r["env_steps"]) > warmup] or records
    return statistics.fmean(float(r["wall_time"]) for r in learning)


def mean_calibration(a: fragments.Calibration, b: fragments.Calibration) -> fragments.Calibration:
    """The mean of two calibrations of one config, node by node."""

    def mean(x: dict[str, float], y: dict[str, float]) -> dict[str, float]:
        return {name: (x[name] + y[name]) / 2 for name in x if name in y}

    return dataclasses.replace(
        a,
        node_seconds=mean(a.node_seconds, b.node_seconds),
        half_node_seconds=mean(a.half_node_seconds, b.half_node_seconds),
        iteration_s=(a.iteration_s + b.iteration_s) / 2,
    )


def _append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def _records(path: Path) -> list[dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        latest[record["workload"]] = record  # a workload measured again replaces its older record
    return list(latest.values())


@functools.cache
def _graph(config: str, overrides: tuple[str, ...]) -> Any:
    """The traced graph of a config: traced once, however many constants a fit tries on it."""
    return plan(load_config(config, list(overrides))).fdg.graph


def predictions(
    record: dict[str, Any], shape: fragments.ClusterShape, constants: fragments.CostConstants
) -> dict[str, fragments.Prediction]:
    """Every preset of a measured record predicted from its stored calibration."""
    graph = _graph(record["config"], tuple(record["overrides"]))
    calibration = fragments.Calibration.from_dict(record["calibration"])
    out = {}
    for label, spec in PRESETS.items():
        fdg = fragments.partition(graph, policies.load_policy(spec))
        out[label] = fragments.predict(fdg, calibration, shape, constants)
    return out


def report(path: Path, shape: fragments.ClusterShape, constants: fragments.CostConstants) -> list[float]:
    """Print the matrix for the records in ``path``; return the rows' errors (predicted / measured - 1)."""
    errors: list[float] = []
    picks: list[bool] = []
    print("| workload | preset | measured ms/iter | predicted | error | predicted comm. share | model's largest term |")
    print("|---|---|---:|---:|---:|---:|---|")
    for record in _records(path):
        if "skipped" in record:
            print(f"| {record['workload']} | every preset | - | - | - | - | not run: {record['skipped']} |")
            continue
        predicted = predictions(record, shape, constants)
        measured = record["measured"]
        for label, prediction in predicted.items():
            row = measured.get(label)
            if row is None:
                continue
            seconds = row["seconds_per_iteration"]
            error = prediction.iteration_s / seconds - 1
            errors.append(error)
            comm = prediction.communication_s / prediction.iteration_s if prediction.iteration_s else 0.0
            print(
                f"| {record['workload']} | {label} | {seconds * 1e3:.1f} | {prediction.iteration_s * 1e3:.1f} | "
                f"{error:+.0%} | {comm:.0%} | {prediction.dominant} |"
            )
        chosen = max(predicted, key=lambda k: predicted[k].env_steps_per_s if predicted[k].feasible else -1)
        fastest = max(measured, key=lambda k: measured[k]["env_steps_per_s"])
        ratio = measured[chosen]["env_steps_per_s"] / measured[fastest]["env_steps_per_s"]
        picks.append(ratio >= 0.9)
        print(f"| {record['workload']} | auto chose {chosen} | fastest measured: {fastest} | {ratio:.2f}x | | | |")
    if errors:
        within = sum(abs(e) <= 0.2 for e in errors) / len(errors)
        print(
            f"\n{len(errors)} rows: median |error| {statistics.median(abs(e) for e in errors):.0%}, "
            f"largest {max(abs(e) for e in errors):.0%}, within 20%: {within:.0%}; auto within 10% of the "
            f"fastest in {sum(picks)}/{len(picks)} workloads"
        )
    return errors


def fit(path: Path, shape: fragments.ClusterShape, leave_out: str | None = None) -> fragments.CostConstants:
    """The transport constants (same-host message and ring step, Ray's cores, the driver's round, the
    run loop's record) that minimise the median |log(predicted / measured)| over the stored rows:
    coordinate descent over a grid of each, from the defaults, until no step improves it.  With
    ``leave_out``, that workload's rows are not fitted on."""
    grid = {
        "local_message_s": [0.15e-3, 0.3e-3, 0.45e-3, 0.6e-3, 0.9e-3, 1.2e-3],
        "local_ring_step_s": [0.05e-3, 0.2e-3, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 3e-3, 4e-3],
        "ray_cores": [0.0, 0.2, 0.4, 0.6, 0.8],
        "driver_s": [1e-3, 2e-3, 4e-3, 7e-3, 10e-3],
        "record_s": [0.0, 1e-3, 3e-3, 6e-3],
    }
    records = [r for r in _records(path) if "skipped" not in r and r["workload"] != leave_out]

    def score(constants: fragments.CostConstants) -> float:
        logs = []
        for record in records:
            for label, prediction in predictions(record, shape, constants).items():
                if label in record["measured"]:
                    measured = record["measured"][label]["seconds_per_iteration"]
                    logs.append(abs(math.log(prediction.iteration_s / measured)))
        return statistics.median(logs)

    best = fragments.CostConstants()
    best_score = score(best)
    improved = True
    while improved:
        improved = False
        for name, values in grid.items():
            for value in values:
                candidate = dataclasses.replace(best, **{name: value})
                candidate_score = score(candidate)
                if candidate_score < best_score - 1e-9:
                    best, best_score, improved = candidate, candidate_score, True
    print(f"fitted (median |log error| {best_score:.3f}): {best}")
    return best


TESTBED_LINKS = {"none": (math.inf, 0.0), "1gbit-0.5ms": (1e9, 0.5e-3), "100mbit-2ms": (100e6, 2e-3)}
"""``benchmarks.multihost_scaling``'s link profiles: each shaped link's delay (a message between two
hosts crosses two: twice it, one way)."""


def testbed_report(
    results: Path, machine: Path, constants: fragments.CostConstants, workload: str = "ppo_cartpole"
) -> list[float]:
    """Predict the runs of ``benchmarks.multihost_scaling`` (``results``: its hosts*.json of
    ``workload``'s config and overrides, eager) from that workload's calibration in ``machine``:
    hosts that share this machine's cores, each offering Ray its CPUs, the profile's link; print
    them beside the measurements, and per profile whether the plan's first row measured within 10%
    of the fastest."""
    data = json.loads(results.read_text())
    meta, rows = data["meta"], data["rows"]
    record = next((r for r in _records(machine) if r["workload"] == workload and "skipped" not in r), None)
    if record is None:
        raise SystemExit(f"plan_accuracy: error: no calibration of {workload!r} in {machine}")
    calibration = fragments.Calibration.from_dict(record["calibration"])
    graph = _graph(record["config"], tuple(record["overrides"]))
    cores = float(this_machine().cores)
    errors: list[float] = []
    print("| workload | hosts | link | preset | replicas | measured ms/iter | predicted | error | largest term |")
    print("|---|---:|---|---|---:|---:|---:|---:|---|")
    by_profile: dict[str, list[tuple[str, float, float]]] = {}
    for row in rows:
        rate, delay = TESTBED_LINKS[row["profile"]]
        shape = fragments.ClusterShape(
            hosts=meta["hosts"],
            cores=float(meta["cpus_per_host"]),
            cpus=float(meta["cpus_per_host"]),
            shared_cores=cores,
            # a message crosses two shaped links (the sender's and the receiver's): twice the delay;
            # the rate is tc tbf's, whose 64 KiB bucket lets a small message pass at the veth's speed
            # while a bulk one (frames, weights, an all-reduce) pays the rate
            link=fragments.Link(rate, 2 * delay),
        )
        spec: dict[str, Any] = {"preset": row["preset"]}
        if row["preset"] == "gpu_only":
            spec["device"] = "cpu"
        else:
            key = {"single_learner_coarse": "actors", "single_learner_fine": "envs", "multi_learner": "learners"}
            spec[key.get(row["preset"], "actors")] = row["replicas"]
            spread = row["preset"] == "multi_learner" and row["replicas"] <= meta["hosts"]
            spec["placement"] = "STRICT_SPREAD" if spread else "SPREAD"
        predicted = fragments.predict(
            fragments.partition(graph, policies.load_policy(spec)), calibration, shape, constants
        )
        error = predicted.iteration_s / row["iteration_s"] - 1
        errors.append(error)
        by_profile.setdefault(row["profile"], []).append((row["preset"], predicted.iteration_s, row["iteration_s"]))
        print(
            f"| {workload} | {meta['hosts']} | {row['profile']} | {row['preset']} | {row['replicas']} | "
            f"{row['iteration_s'] * 1e3:.1f} | {predicted.iteration_s * 1e3:.1f} | {error:+.0%} | "
            f"{predicted.dominant} |"
        )
    for profile, cells in by_profile.items():
        chosen = min(cells, key=lambda c: c[1])
        fastest = min(cells, key=lambda c: c[2])
        print(f"{profile}: auto chose {chosen[0]}, fastest measured {fastest[0]}: {fastest[2] / chosen[2]:.2f}x")
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plan_accuracy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    parser.add_argument("--cluster", default="this_machine", help="the results file's name (this_machine)")
    parser.add_argument("--report", action="store_true", help="print the matrix from the stored records")
    parser.add_argument("--fit", action="store_true", help="with --report: fit the transport constants first")
    parser.add_argument(
        "--testbed",
        type=Path,
        help="predict benchmarks.multihost_scaling's runs in this hosts*.json (of --workloads' first, eager) instead",
    )
    parser.add_argument(
        "--holdout", action="store_true", help="each workload's rows predicted with constants fitted on the others"
    )
    parser.add_argument("--hosts", type=int, help="with --report: predict for a --hosts cluster (testbed records)")
    parser.add_argument("--link", default="none", help="with --hosts: the link, e.g. 1gbit/0.5ms")
    args = parser.parse_args(argv)
    path = RESULTS / f"{args.cluster}.jsonl"
    shape = this_machine() if args.hosts is None else hypothetical_cluster(args.hosts, args.link)
    if args.testbed is not None:
        constants = fit(path, this_machine()) if args.fit else fragments.CostConstants()
        errors = testbed_report(args.testbed, path, constants, args.workloads.split(",")[0])
        within = sum(abs(e) <= 0.2 for e in errors) / len(errors)
        print(
            f"{len(errors)} rows: median |error| {statistics.median(abs(e) for e in errors):.0%}, "
            f"largest {max(abs(e) for e in errors):.0%}, within 20%: {within:.0%}"
        )
        return 0
    if args.holdout:  # each workload predicted with the constants fitted on the others
        errors = []
        for record in _records(path):
            if "skipped" in record:
                continue
            constants = fit(path, shape, leave_out=record["workload"])
            predicted = predictions(record, shape, constants)
            errors += [
                predicted[label].iteration_s / row["seconds_per_iteration"] - 1
                for label, row in record["measured"].items()
            ]
        within = sum(abs(e) <= 0.2 for e in errors) / len(errors)
        print(
            f"held out, {len(errors)} rows: median |error| {statistics.median(abs(e) for e in errors):.0%}, "
            f"largest {max(abs(e) for e in errors):.0%}, within 20%: {within:.0%}"
        )
        return 0
    if args.report:
        constants = fit(path, shape) if args.fit else fragments.CostConstants()
        report(path, shape, constants)
        return 0
    for name in args.workloads.split(","):
        measure(name, WORKLOADS[name], path)
    return 0


__all__ = ["WORKLOADS", "fit", "measure", "predictions", "report"]

if __name__ == "__main__":
    raise SystemExit(main())
