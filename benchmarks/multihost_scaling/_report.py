"""``python -m benchmarks.multihost_scaling --report``: the scaling model of docs/scaling.md fitted on the
measured runs (benchmarks/results/multihost/hosts*.json), its error at every size measured, and its
predictions at 8, 64 and 512 hosts."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.multihost_scaling.model import (
    RATES,
    WORKLOADS,
    Compute,
    Constants,
    Link,
    Workload,
    busiest_bytes,
    check,
    delay,
    fit,
    predict,
    row_traffic,
)

PRESETS = ["single_learner_coarse", "single_learner_fine", "multi_learner", "multi_learner_hd", "async_single_learner"]
"""gpu_only is left out: one fragment, it runs on one host however many there are (its figure is the
1-host one).  multi_learner_hd: multi_learner with a halving-doubling all-reduce, for comparison."""
SIZES = [3, 8, 64, 512]
LINKS = {"10 Gbit/s, 0.1 ms": Link(10e9, 0.1e-3), "1 Gbit/s, 0.5 ms": Link(1e9, 0.5e-3)}
QUIET = (
    Constants(alpha=3.548e-3 / 2, alpha_ring=0.1e-3, header=1400.0),
    Compute(per_env_step=1.7e-6, per_infer_step=5.0e-6, per_sample=47e-3 / 2048),
)
"""A quiet VM: BENCHMARKS.md, "What does each distribution policy cost on one machine?", 2026-11-23
(the same 2-core VM, otherwise quiet): local PPO at 34,383 env steps/s with 6% env, 13% inference,
4% buffer, a 47 ms update of 2048 samples, a Ray actor round trip of 3,548 us (two messages); a
gloo ring step of 0.1 ms on a quiet LAN is assumed, not measured; framing bytes as fitted here."""
FITTED = Constants(alpha=3.66e-3, alpha_ring=4.62e-3, header=1438.0)
"""The constants fitted on all 36 three-host PPO CartPole runs of 2026-11-28 (docs/scaling.md):
what the other workloads' runs are predicted with where those runs are not in ``--out``."""
QUIET_ATARI = Compute(per_env_step=0.45e-3, per_infer_step=0.41e-3, per_sample=2.36e-3)
"""PPO on Pong, ``local`` with both cores on the quiet VM (BENCHMARKS.md, "How fast does msrl train
from pixels?", 2026-12-06 round 1): env 0.45 ms, inference + buffer 0.41 ms and learning 2.36 ms
(4 epochs, two threads) per agent step."""
GPU_ATARI = (15e-6, 16 * 2e-3)
"""Assumed, not measured (no GPU here): a GPU learner's Nature-CNN step costs 15 us a frame over
PPO's 4 epochs (57 MFLOP a frame forward and backward at 15 TFLOP/s sustained) plus 2 ms of launches
a minibatch step (16 an iteration)."""
GPU_LAUNCH_S = 1e-3
"""Assumed, not measured (no GPU here): one PPO minibatch step of this 9k-parameter network on a GPU
costs about a kernel-launch-bound millisecond, whatever the minibatch up to 512 hosts' samples."""


def load(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Each results file's rows (``hosts3``, ``hosts2``, ``hosts2-burst3028``), marked with its tbf bucket."""
    found = {}
    for path in sorted(out.glob("hosts*.json")):
        data = json.loads(path.read_text())
        marks = {"tbf_burst": data["meta"].get("tbf_burst", 0), "delay_applied": data["meta"].get("delay_applied")}
        marks["config"] = data["meta"].get("config", "ppo_cartpole")
        found[path.stem] = [{**row, **marks} for row in data["rows"]]
    return found


def compute_constants(rows: list[dict[str, Any]], w: Workload = WORKLOADS["ppo_cartpole"]) -> Compute:
    """Per env step of a rollout replica and per sample learned, from coarse's two-replica runs
    (the rollout fragment's env + inference + buffer phases over its half of the envs; the
    learner's learn phase over the iteration's samples)."""
    coarse = [r for r in rows if r["preset"] == "single_learner_coarse" and r["replicas"] == 2]
    env = statistics.fmean(r["fragments"]["rollout"]["time_env"] for r in coarse)
    infer = statistics.fmean(
        r["fragments"]["rollout"]["time_inference"] + r["fragments"]["rollout"]["time_buffer"] for r in coarse
    )
    learn = statistics.fmean(r["fragments"]["learner"]["time_learn"] for r in coarse)
    replica_steps = w.num_envs // 2 * w.num_steps
    return Compute(env / replica_steps, infer / replica_steps, per_sample=learn / (w.num_envs * w.num_steps))


def checked(rows: list[dict[str, Any]], k: Constants) -> str:
    heads = ["preset", "replicas", "hosts", "link", "iteration ms, measured", "model", "error"]
    heads += ["comm. ms, measured", "model", "busiest interface kB/it, measured", "model"]
    lines = ["| " + " | ".join(heads) + " |", "|---|---:|---:|---|" + "---:|" * 7]
    for r in rows:
        c = check(r, k)
        link = r["profile"] if delay(r) else r["profile"].split("-")[0]
        cells = [r["preset"], str(r["replicas"]), str(r["hosts"]), link]
        cells += [f"{1e3 * r['iteration_s']:.0f}", f"{1e3 * c['iteration_predicted_s']:.0f}"]
        cells += [f"{100 * c['time_error']:+.0f}%", f"{1e3 * r['communication_s']:.0f}"]
        cells += [f"{1e3 * c['comm_predicted_s']:.0f}", f"{c['bytes_measured'] / 1e3:.0f}"]
        cells += [f"{c['bytes_predicted'] / 1e3:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def errors(rows: list[dict[str, Any]], k: Constants) -> str:
    """The iteration time's error (measured compute plus modelled communication) and the
    communication's alone, as the median and largest over the runs."""
    checks = [check(r, k) for r in rows]
    errs = [abs(c["time_error"]) for c in checks]
    comm = [abs(c["comm_predicted_s"] - r["communication_s"]) for c, r in zip(checks, rows, strict=True)]
    rel = [
        abs(c["comm_predicted_s"] / r["communication_s"] - 1)
        for c, r in zip(checks, rows, strict=True)
        if r["communication_s"] > 0.05
    ]
    return (
        f"iteration time: median |error| {100 * statistics.median(errs):.0f}%, largest {100 * max(errs):.0f}%; "
        f"communication: median |error| {1e3 * statistics.median(comm):.0f} ms, largest {1e3 * max(comm):.0f} ms"
        + (f", median {100 * statistics.median(rel):.0f}% where it is over 50 ms" if rel else "")
        + f" ({len(rows)} runs)"
    )


def delay_terms(rows: list[dict[str, Any]]) -> str:
    """Where runs applied a delay: what it added to the communication and iteration time, over the same
    preset's undelayed runs (``none``) of the same set (means over rounds), against the model's delay
    term (one-way trips on the critical path x the host-to-host delay), which has no fitted constant."""
    heads = ["preset", "replicas", "link", "runs", "trips", "one-way delay ms", "model: trips x delay ms"]
    heads += ["comm. added ms, measured", "iteration added ms, measured", "measured / model (comm.)"]
    lines = ["| " + " | ".join(heads) + " |", "|---|---:|---|" + "---:|" * (len(heads) - 3)]
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["preset"], r["replicas"], r["profile"]), []).append(r)
    for (preset, replicas, profile), runs in groups.items():
        base = groups.get((preset, replicas, "none"))
        if not delay(runs[0]) or not base:
            continue
        term = row_traffic(runs[0]).trips * delay(runs[0])
        comm, wall = (statistics.fmean(r[k] for r in runs) - statistics.fmean(b[k] for b in base) for k in KEYS)
        cells = [preset, str(replicas), profile, f"{len(runs)} / {len(base)}", str(row_traffic(runs[0]).trips)]
        cells += [f"{1e3 * delay(runs[0]):.1f}", f"{1e3 * term:.0f}", f"{1e3 * comm:.0f}", f"{1e3 * wall:.0f}"]
        lines.append("| " + " | ".join([*cells, f"{comm / term:.2f}"]) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


KEYS = ("communication_s", "iteration_s")


def predictions(
    c: Compute,
    k: Constants,
    w: Workload = WORKLOADS["ppo_cartpole"],
    envs_per_host: int = 32,
    gpu_learner: tuple[float, float] = (0.0, 4 * 8 * GPU_LAUNCH_S),
) -> str:
    """Env steps/s at each size, CPU learners and GPU learners (``gpu_learner``: per sample and per
    update, seconds; by default ``GPU_LAUNCH_S`` a minibatch step, whatever the batch)."""
    gpu = Compute(c.per_env_step, c.per_infer_step, per_sample=gpu_learner[0], per_update=gpu_learner[1])
    lines = [
        "| preset | learner | link | 1 host | " + " | ".join(f"{h} hosts" for h in SIZES) + " | half efficiency at |"
    ]
    lines.append("|---|---|---|" + "---:|" * (len(SIZES) + 2))
    for learner, cc in (("CPU", c), ("GPU", gpu)):
        for name, link in LINKS.items():
            for preset in PRESETS:
                at = [predict(preset, h, link, k, cc, envs_per_host, w)["steps_per_s"] for h in [1, *SIZES]]
                cells = " | ".join(f"{value:,.0f}" for value in at)
                half = limits(preset, link, k, cc, envs_per_host, w)
                lines.append(f"| {preset} | {learner} | {name} | {cells} | {half} |")
    return "\n".join(lines)


def limits(
    preset: str, link: Link, k: Constants, c: Compute, envs_per_host: int = 32, w: Workload = WORKLOADS["ppo_cartpole"]
) -> str:
    """The first host count (up to 1024) where a host adds less than half of what one host does
    alone: env steps/s per host under 50% of the 1-host figure (parallel efficiency)."""
    rate = lambda h: predict(preset, h, link, k, c, envs_per_host, w)["steps_per_s"]  # noqa: E731
    one = rate(1)
    grid = sorted({*range(2, 65), *range(64, 1025, 16)})
    half = next((h for h in grid if rate(h) / h < 0.5 * one), None)
    return f"{half}" if half else f"> {grid[-1]}"


def report(out: Path) -> str:
    runs = load(out)
    parts = cartpole(runs) if "hosts3" in runs else []
    k = fit(runs["hosts3"]) if "hosts3" in runs else FITTED
    for _, rows in sorted(runs.items()):
        config = rows[0]["config"] if rows else "ppo_cartpole"
        if config != "ppo_cartpole":
            parts += workload(config, rows, k, "hosts3" in runs)
    return "\n".join(parts)


def cartpole(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The model fitted on the PPO CartPole runs, checked on them, and its predictions."""
    main = runs["hosts3"]
    base = [r for r in main if r["replicas"] <= 2]
    k2, k = fit(base), fit(main)
    c = compute_constants(main)
    parts = [constants(f"fitted on the {len(base)} runs with 2 replicas on 3 hosts", k2)]
    parts.append(constants(f"fitted on all {len(main)} runs on 3 hosts (used for the predictions)", k))
    parts.append(
        f"compute: {1e6 * c.per_env_step:.1f} us env and {1e6 * c.per_infer_step:.1f} us inference + buffer per env "
        f"step of a replica, {1e6 * c.per_sample:.1f} us per sample learned (4 epochs)"
    )
    wider = [r for r in main if r["replicas"] > 2]
    sections = [("3 hosts, 2 replicas (fitted on)", base)]
    sections += [("3 hosts, 4 replicas (not fitted on: predicted)", wider)] if wider else []
    sections += [
        (f"{name} (not fitted on: predicted)", rows)
        for name, rows in sorted(runs.items())
        if name != "hosts3" and rows and rows[0]["config"] == "ppo_cartpole"
    ]
    for title, rows in sections:
        parts += [f"\n{title}: {errors(rows, k2)}", checked(rows, k2)]
        if added := delay_terms(rows):
            parts += [f"\nthe delay's term, {title}: added over the undelayed runs against the model", added]
    delayed, undelayed = [r for r in main if delay(r)], [r for r in main if not delay(r)]
    if delayed and undelayed:  # the delayed runs predicted from constants fitted without them
        k0 = fit(undelayed)
        parts.append(f"\n{constants(f'fitted on the {len(undelayed)} undelayed runs on 3 hosts', k0)}")
        parts += [f"the {len(delayed)} delayed runs predicted with it: {errors(delayed, k0)}", checked(delayed, k0)]
    parts += ["\npredicted env steps/s, one replica of 32 envs per host (weak scaling), constants fitted here"]
    parts += [predictions(c, k), "\nthe same with a quiet VM's constants (QUIET)", predictions(QUIET[1], QUIET[0])]
    return parts


def workload(config: str, rows: list[dict[str, Any]], k: Constants, fitted_here: bool) -> list[str]:
    """Another workload's runs (``config``) predicted with the CartPole constants (not fitted on
    them), and its predictions: one rollout of its own size per host."""
    w = WORKLOADS[config]
    source = "fitted on the CartPole runs in --out" if fitted_here else "FITTED (docs/scaling.md's CartPole fit)"
    parts = [f"\n{config} on {rows[0]['hosts']} hosts, not fitted on, with the constants {source}: {errors(rows, k)}"]
    parts.append(checked(rows, k))
    c = compute_constants(rows, w)
    parts.append(
        f"compute here: {1e3 * c.per_env_step:.2f} ms env and {1e3 * c.per_infer_step:.2f} ms inference + buffer "
        f"per env step of a replica, {1e3 * c.per_sample:.2f} ms per sample learned"
    )
    title = f"predicted env steps/s for {config}, one replica of {w.num_envs} envs per host (weak scaling)"
    parts += [f"\n{title}, compute from the quiet VM (QUIET_ATARI), GPU learner as GPU_ATARI, QUIET's constants"]
    parts.append(predictions(QUIET_ATARI, QUIET[0], w, w.num_envs, GPU_ATARI))
    return parts


def constants(what: str, k: Constants) -> str:
    return (
        f"{what}: alpha = {1e3 * k.alpha:.2f} ms per Ray message, alpha_ring = {1e3 * k.alpha_ring:.2f} ms per "
        f"ring step, {k.header:.0f} bytes of framing per message"
    )


def links_in(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({r["profile"] for r in rows}, key=list(RATES).index)


__all__ = ["busiest_bytes", "report"]
