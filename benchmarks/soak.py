"""Does a long multi-host run lose or repeat anything under a schedule of faults?

PPO CartPole under ``single_learner_coarse`` spread over testbed hosts (``testbed``: network
namespaces of this machine, each its own Ray node), for ``--minutes`` (30 by default), while a fault
is injected about every ``--every`` seconds, in turn: the fragment workers on a rollout replica's host
SIGKILLed, a host's link cut for 3 s (a partition that heals), those on the learner's host
SIGKILLed, the driver sent SIGTERM (then
``msrl train --resume`` of the checkpoint it names), a host drained with notice and then lost (Ray's
drain with a deadline, then every process on it SIGKILLed), a spare host joining the cluster; then
again from the first. When the time is up the driver gets SIGTERM once more and the run is checked:

* every iteration's record present exactly once, in order, its env steps the iteration's share;
* the ``restarts`` and ``lost_env_steps`` it counts match the restarts the driver reported;
* the checkpoint verifies, and its greedy evaluation (20 episodes) reaches the return that
  ``configs/ppo_cartpole.yaml`` is held to (475), as an undisturbed run does.

Each fault's cost is the time from its injection until the run records an iteration past the
last one recorded before it (what the run had to redo or wait for).  The report (``--out``, JSON)
holds every fault, its cost, and the checks.  Needs root (namespaces), like ``testbed``::

    python -m benchmarks.soak                    # 30 minutes, a fault a minute
    python -m benchmarks.soak --minutes 5 --every 40 --out /tmp/soak.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, command_line
from testbed import Testbed, TestbedError, unavailable

CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")
OUT = REPO / "benchmarks" / "figures" / "soak" / "soak.json"
HOSTS = 6
"""Namespaces made: three start as the cluster; the others join, one at a time, after a host is lost."""
FIRST = (0, 1, 2)
SPARES = (3, 4, 5)
RUN = "ppo_cartpole"
OVERRIDES = (
    "policy=single_learner_coarse",
    "policy.placement=SPREAD",
    "checkpoint_every=5",
    "max_restarts=1000",
    "liveness_timeout_s=10",
    "eval_episodes=0",
    "progress=false",
    "total_env_steps=1000000000",
)
PASS_RETURN = 475.0


@dataclasses.dataclass
class Fault:
    kind: str
    at_s: float
    detail: str = ""
    iteration_before: int = 0
    recovered_s: float | None = None
    """Seconds from injection until an iteration past ``iteration_before`` was recorded."""


class Soak:
    """The testbed, the driver process on its head host, and the faults injected so far."""

    def __init__(self, bed: Testbed, runs: Path) -> None:
        self.bed, self.runs = bed, runs
        self.run_dir = runs / RUN
        self.driver: subprocess.Popen | None = None
        self.log = (runs / "driver.log").open("a")
        self.started = time.monotonic()
        self.faults: list[Fault] = []
        self.alive = set(FIRST)
        self.used = set(FIRST)
        self.drivers = 0

    # -- the driver --------------------------------------------------------------------------------
    def start_driver(self, resume: bool) -> None:
        head = self.bed.head_address
        if resume:
            argv = [sys.executable, "-m", "msrl", "train", "--resume", str(self.run_dir / "checkpoint.pt")]
        else:
            argv = [sys.executable, "-m", "msrl", "train", CONFIG, "--set", f"runs_dir={self.runs}"]
            argv += [a for o in OVERRIDES for a in ("--set", o)]
        argv += ["--address", head]
        self.driver = self.bed.popen(0, argv, cwd=str(REPO), stdout=self.log, stderr=subprocess.STDOUT)
        self.drivers += 1

    def stop_driver(self) -> int:
        """SIGTERM to the driver (``msrl train``, the child of the ``nsenter`` that entered the head
        host for it): it checkpoints at the iteration's end and exits 143, as ``nsenter`` then does."""
        assert self.driver is not None
        self.bed.send_signal(self.driver, signal.SIGTERM)
        return self.driver.wait(timeout=300)

    def iteration(self) -> int:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return 0
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        try:
            return int(json.loads(lines[-1])["iteration"]) if lines else 0
        except (json.JSONDecodeError, KeyError):
            return 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    # -- the faults ----------------------------------------------------------------------------------
    def inject(self, kind: str) -> Fault | None:
        fault = Fault(kind, self.elapsed(), iteration_before=self.iteration())
        if kind in ("kill rollout", "kill learner"):
            target = self._workers_of("rollout" if kind == "kill rollout" else "learner")
            if target is None:
                return None
            host, pids = target
            self.bed.run(host, ["kill", "-KILL", *map(str, pids)])
            fault.detail = f"{len(pids)} worker process(es) on {self.bed.address(host)}, pids {pids}"
        elif kind == "partition":
            host = max(self.alive - {0})
            self.bed.set_link(host, up=False)
            time.sleep(3)
            self.bed.set_link(host, up=True)
            fault.detail = f"{self.bed.address(host)} cut off for 3 s"
        elif kind == "driver SIGTERM":
            code = self.stop_driver()
            fault.detail = f"exit {code}, resumed"
            if code != 128 + signal.SIGTERM:
                raise RuntimeError(f"the driver ended with {code} on SIGTERM: see {self.log.name}")
            self.start_driver(resume=True)
        elif kind == "drain, then lose":
            if len(self.alive) < len(FIRST):  # the policy needs three CPUs besides the head's work
                return None
            host = max(self.alive - {0})
            self.bed.drain(host, deadline_s=60, reason="soak: preemption notice")
            self._wait_moved(host, timeout_s=60)
            self.bed.kill_host(host)
            self.alive.discard(host)
            fault.detail = f"{self.bed.address(host)} drained, then its processes killed"
        elif kind == "host joins":
            spare = next((h for h in SPARES if h not in self.used), None)
            if spare is None:
                return None
            self.bed.start_ray([spare], alive=len(self.alive) + 1)
            self.alive.add(spare)
            self.used.add(spare)
            fault.detail = f"{self.bed.address(spare)} joined"
        self.faults.append(fault)
        return fault

    def _workers_of(self, fragment: str) -> tuple[int, list[int]] | None:
        """(host, pids in its namespace) of the fragment workers on the host where the run's
        ``placement.txt`` puts ``fragment``'s last replica: Ray's actor table, read from the head
        (its state API needs a dashboard, which the testbed does not start)."""
        placement = self.run_dir / "placement.txt"
        lines = placement.read_text().splitlines() if placement.exists() else []
        line = next((ln for ln in reversed(lines) if ln.startswith(f"fragment {fragment}[")), "")
        hosts = {self.bed.address(h): h for h in range(HOSTS)}
        ip = next((address for address in hosts if f" on node {address} " in line), None)
        if ip is None:
            return None
        script = (
            "import json, ray, ray._private.state as state\n"
            f"ray.init(address={self.bed.head_address!r}, logging_level='ERROR')\n"
            "print(json.dumps([[a['Address']['IPAddress'], a['Pid']] for a in state.actors().values()\n"
            "    if a['State'] == 'ALIVE' and a['ActorClassName'].endswith('FragmentWorker')]))\n"
        )
        done = self.bed.run(0, [sys.executable, "-c", script], timeout=120)
        if done.returncode:
            return None
        pids = [int(pid) for address, pid in json.loads(done.stdout.strip().splitlines()[-1]) if address == ip]
        return (hosts[ip], pids) if pids else None

    def _wait_moved(self, host: int, timeout_s: float) -> None:
        """Until the run says it moved off ``host`` (or the notice's deadline passes)."""
        deadline = time.monotonic() + timeout_s
        needle = f"moved off {self.bed.address(host)}"
        while time.monotonic() < deadline:
            self.log.flush()
            if needle in Path(self.log.name).read_text(errors="replace"):
                return
            time.sleep(0.5)

    def watch(self, until_s: float) -> None:
        """Until ``until_s``: note when each fault's run recorded past the iteration it was at."""
        while self.elapsed() < until_s:
            if self.driver is not None and self.driver.poll() is not None:
                raise RuntimeError(f"the driver ended ({self.driver.returncode}): see {self.log.name}")
            now = self.iteration()
            for fault in self.faults:
                if fault.recovered_s is None and now > fault.iteration_before:
                    fault.recovered_s = self.elapsed() - fault.at_s
            time.sleep(0.5)


SCHEDULE = ("kill rollout", "partition", "kill learner", "driver SIGTERM", "drain, then lose", "host joins")


def check(run_dir: Path, log: str) -> dict[str, Any]:
    """What the run kept, against what it should hold."""
    import msrl
    from msrl.app import read_metrics

    records = read_metrics(run_dir)
    iterations = [int(r["iteration"]) for r in records]
    per_iteration = {int(r["env_steps"]) // max(1, int(r["iteration"])) for r in records}
    restarts_said = sum(1 for line in log.splitlines() if "; restart " in line and "/1000 from " in line)
    evaluation = msrl.evaluate(str(run_dir / "checkpoint.pt"), episodes=20)
    return {
        "iterations": len(records),
        "each_once_in_order": iterations == list(range(1, len(records) + 1)),
        "env_steps_per_iteration": sorted(per_iteration),
        "restarts_recorded": int(records[-1]["restarts"]) if records else 0,
        "restarts_reported": restarts_said,
        "lost_env_steps": int(records[-1]["lost_env_steps"]) if records else 0,
        "checkpoint_verifies": True,  # msrl.evaluate refuses one that does not
        "greedy_return": evaluation.mean,
        "learned": evaluation.mean >= PASS_RETURN,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between faults")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--keep", type=Path, help="keep the run directory here (default: a temporary one)")
    args = parser.parse_args(argv)
    why_not = unavailable()
    if why_not:
        print(f"soak: error: no testbed here: {why_not}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the testbed's teardown
    started_utc = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    runs = args.keep or Path(os.environ.get("TMPDIR", "/tmp")) / f"msrl-soak-{os.getpid()}"
    runs.mkdir(parents=True, exist_ok=True)
    bed = Testbed(hosts=HOSTS, cpus=2)
    try:
        bed.up(start_ray=False)
        bed.start_ray(list(FIRST), alive=len(FIRST))
        soak = Soak(bed, runs)
        soak.start_driver(resume=False)
        soak.watch(until_s=args.every)
        n = 0
        while soak.elapsed() < args.minutes * 60:
            kind = SCHEDULE[n % len(SCHEDULE)]
            n += 1
            fault = soak.inject(kind)
            print(f"soak: {soak.elapsed():6.0f} s  {kind}: {fault.detail if fault else 'skipped'}", flush=True)
            soak.watch(until_s=min(soak.elapsed() + args.every, args.minutes * 60))
        soak.stop_driver()
        soak.log.close()
        log = Path(soak.log.name).read_text(errors="replace")
        result = check(soak.run_dir, log)
    except (TestbedError, RuntimeError) as exc:
        print(f"soak: error: {exc}", file=sys.stderr)
        return 2
    finally:
        bed.down()
    costs = [f.recovered_s for f in soak.faults if f.recovered_s is not None]
    report = {
        "meta": {
            "command": command_line("benchmarks.soak", argv),
            "minutes": args.minutes,
            "every_s": args.every,
            "hosts": f"{len(FIRST)} testbed hosts of 2 CPUs (up to {len(SPARES)} more joining, one after each"
            f" host lost) on one VM of {os.cpu_count()} cores",
            "started_utc": started_utc,
            "drivers": soak.drivers,
        },
        "faults": [dataclasses.asdict(f) for f in soak.faults],
        "checks": result,
        "recovery_s": {
            kind: [round(f.recovered_s, 1) for f in soak.faults if f.kind == kind and f.recovered_s is not None]
            for kind in SCHEDULE
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(result, indent=1))
    if costs:
        print(
            f"soak: {len(soak.faults)} faults, median recovery {statistics.median(costs):.1f} s; report in {args.out}"
        )
    ok = result["each_once_in_order"] and result["learned"] and len(result["env_steps_per_iteration"]) == 1
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
