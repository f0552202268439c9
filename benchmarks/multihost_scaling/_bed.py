"""What ``benchmarks.multihost_scaling`` does on a testbed: shape every host's link to a profile, read each
host's ``eth0`` kernel counters, and time one ``msrl train`` run while sampling those counters at
the end of every iteration (when the driver appends a line to ``metrics.jsonl``).

Bytes on the wire are counted only inside the training window: from the end of iteration 1 (its
line appears) to the end of the last iteration, so worker start-up, the first iteration's warm-up
and shutdown fall outside it.  What Ray sends when no run is on (GCS heartbeats, resource reports)
is measured on the same hosts just before the run, as a rate over an idle window, and that rate
times the window's length is subtracted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness import REPO
from testbed import Testbed

CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")
STATS = "/sys/class/net/eth0/statistics"
COUNTERS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
PROFILES = {  # name -> (rate, one-way delay per shaped link), applied both ways on every host's link
    "none": None,
    "10gbit-0.1ms": ("10gbit", "0.1ms"),
    "1gbit-0.5ms": ("1gbit", "0.5ms"),
    "100mbit-2ms": ("100mbit", "2ms"),
}


def apply_profile(bed: Testbed, profile: str, delay: bool, burst: int = 0) -> None:
    """Every host's link (both ends of its veth pair) shaped to ``profile``; ``none`` removes it.  With
    ``delay``, rate and delay (tc netem, or where the kernel has no netem the testbed's relay for the
    delay and tc tbf for the rate); without it the rate alone (tc tbf).  ``burst``: tbf's bucket in
    bytes (0: the testbed's default, a millisecond of the rate and at least 64 KiB, so a message
    smaller than the bucket that finds it full passes at the veth's speed; two frames, 3028, make
    every message pay the rate; netem has no bucket).  A packet between two hosts crosses two
    shaped links, so its one-way delay is twice the profile's."""
    shaping = PROFILES[profile]
    for host in range(bed.hosts):
        bed.unshape(host)
        if shaping is None:
            continue
        rate, one_way = shaping
        bed.shape(host, rate, one_way if delay else None, burst=burst or None)


def read_counters(bed: Testbed) -> list[dict[str, int]]:
    """Each host's ``eth0`` counters, read inside the host (all hosts at once)."""
    paths = [f"{STATS}/{name}" for name in COUNTERS]
    procs = [bed.popen(h, ["cat", *paths], stdout=subprocess.PIPE, text=True) for h in range(bed.hosts)]
    values = []
    for proc in procs:
        out, _ = proc.communicate(timeout=30)
        values.append(dict(zip(COUNTERS, map(int, out.split()), strict=True)))
    return values


def _diff(after: list[dict[str, int]], before: list[dict[str, int]]) -> list[dict[str, int]]:
    return [{k: a[k] - b[k] for k in COUNTERS} for a, b in zip(after, before, strict=True)]


def idle_rate(bed: Testbed, seconds: float) -> list[dict[str, float]]:
    """Each host's counters' growth per second with the cluster up and no run on it."""
    start, t0 = read_counters(bed), time.monotonic()
    time.sleep(seconds)
    end, t1 = read_counters(bed), time.monotonic()
    return [{k: v / (t1 - t0) for k, v in d.items()} for d in _diff(end, start)]


@dataclass
class Run:
    preset: str
    profile: str
    hosts: int
    replicas: int = 2
    returncode: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    samples: list[tuple[int, float, list[dict[str, int]]]] = field(default_factory=list)
    """(lines in metrics.jsonl, monotonic time, counters) at the end of each iteration."""
    idle: list[dict[str, float]] = field(default_factory=list)
    placement: str = ""
    error: str = ""

    def summary(self) -> dict[str, Any]:
        """Steady iterations (2..N): env steps/s, mean wall time per iteration and its phases, and per
        host the bytes and packets each way per iteration (idle traffic subtracted)."""
        steady = self.records[1:]
        first, last = self.samples[0], self.samples[-1]
        iterations = last[0] - first[0]
        window = last[1] - first[1]
        moved = _diff(last[2], first[2])
        per_host = [
            {k: (d[k] - idle[k] * window) / iterations for k in COUNTERS}
            for d, idle in zip(moved, self.idle, strict=True)
        ]
        wall = sum(r["wall_time"] for r in steady)
        phases = sorted({k for r in steady for k in r if k.startswith("time_") and "/" not in k})
        return {
            "preset": self.preset,
            "profile": self.profile,
            "hosts": self.hosts,
            "replicas": self.replicas,
            "iterations": len(steady),
            "steps_per_s": (steady[-1]["env_steps"] - self.records[0]["env_steps"]) / wall,
            "iteration_s": wall / len(steady),
            **{k: sum(r.get(k, 0.0) for r in steady) / len(steady) for k in phases},
            "window_s": window,
            "per_host": per_host,
            "idle_bytes_per_s": [i["rx_bytes"] + i["tx_bytes"] for i in self.idle],
            "placement": self.placement,
        }


def train_command(bed: Testbed, runs_dir: Path, overrides: list[str], steps: int, config: str = CONFIG) -> list[str]:
    sets = [
        f"runs_dir={runs_dir}",
        "progress=false",
        "eval_episodes=0",
        "checkpoint_every=0",
        f"total_env_steps={steps}",
        *overrides,
    ]
    return [
        sys.executable,
        "-m",
        "msrl",
        "train",
        config,
        "--address",
        bed.head_address,
        *(a for s in sets for a in ("--set", s)),
    ]


def timed_run(
    bed: Testbed, run: Run, overrides: list[str], steps: int, runs_dir: Path, idle_s: float, config: str = CONFIG
) -> Run:
    """One ``msrl train`` of ``config`` from the head host, its counters sampled at the end of every
    iteration."""
    run.idle = idle_rate(bed, idle_s)
    runs_dir.mkdir(parents=True, exist_ok=True)
    log = (runs_dir / "train.log").open("w")
    proc = bed.popen(
        0, train_command(bed, runs_dir, overrides, steps, config), cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT
    )
    seen = 0
    metrics = runs_dir / run_name(config) / "metrics.jsonl"
    while True:
        finished = proc.poll() is not None
        # the run's directory is the config's name, or longer where an override names another env
        metrics = next(iter(sorted(runs_dir.glob("*/metrics.jsonl"))), metrics)
        lines = _count_lines(metrics)
        if lines > seen:
            run.samples.append((lines, time.monotonic(), read_counters(bed)))
            seen = lines
        if finished:
            break
        time.sleep(0.02)
    log.close()
    run.returncode = proc.returncode
    text = (runs_dir / "train.log").read_text(errors="replace")
    run.placement = "; ".join(line.strip() for line in text.splitlines() if " on node " in line)
    if proc.returncode or not metrics.exists():
        run.error = text[-2000:]
        return run
    run.records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return run


def run_name(config: str) -> str:
    """The run directory's name: the config's ``name``."""
    return str(yaml.safe_load(Path(config).read_text())["name"])


def steps_per_iteration(config: str, overrides: Sequence[str] = ()) -> int:
    """Env steps of one iteration: ``algo.num_envs x algo.num_steps`` (on-policy) or
    ``x algo.train_frequency`` (off-policy, one env step of every env between updates), as the
    config sets them or ``overrides`` (``algo.num_envs=32``) change them."""
    algo = dict(yaml.safe_load(Path(config).read_text())["algo"])
    for override in overrides:
        key, _, value = override.partition("=")
        if key in ("algo.num_envs", "algo.num_steps", "algo.train_frequency"):
            algo[key.removeprefix("algo.")] = value
    return int(algo["num_envs"]) * int(algo.get("num_steps", algo.get("train_frequency", 1)))


def _count_lines(path: Path) -> int:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return data.count(b"\n")
