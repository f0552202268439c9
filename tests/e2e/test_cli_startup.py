"""A mistake in a config is answered at once: ``python -m msrl`` reads and checks the config before
it imports torch, Ray, gymnasium, matplotlib or an algorithm's code (seconds on a loaded machine),
so each command below ends in its one ``msrl: error:`` line with none of them imported.

Each command runs in a fresh interpreter (a subprocess: this one has torch imported already), which
prints the heavy modules it holds once the command has ended.  The time allowed leaves room for a
loaded machine; the list of modules is what fails at once if a heavy import runs before the check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from cli_helpers import CONFIG, REPO

HEAVY = ("torch", "ray", "gymnasium", "matplotlib", "networkx", "tensorboardX", "algorithms.", "fragments", "cluster")
"""Modules (and, with a trailing dot, packages' submodules) a config error must not import."""
LIMIT_S = 1.0
"""What a config error may take, from the command to its answer."""
MARGIN = 3.0
"""Room for a loaded machine (2 cores shared with other work): an interpreter with torch imported
took 4-5 s there, one without it 0.1-0.7 s."""

RUN_AND_REPORT = """
import json, runpy, sys
sys.argv = ["msrl", *json.loads(sys.argv[1])]
try:
    runpy.run_module("msrl", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
def held(module, name):
    return module.startswith(name) if name.endswith(".") else module == name or module.startswith(name + ".")
heavy = sorted(m for m in sys.modules if any(held(m, name) for name in {heavy}))
print(json.dumps({{"code": code, "heavy": heavy}}))
"""

CONFIG_ERRORS = {
    "unknown algo key": (["train", CONFIG, "--set", "algo.nope=1"], "unknown config key 'algo.nope'"),
    "unknown run key": (["train", CONFIG, "--set", "nope=1"], "unknown config key 'nope'"),
    "wrong type": (["train", CONFIG, "--set", "seed=abc"], "seed must be int"),
    "unknown policy": (["train", CONFIG, "--set", "policy=ring"], "unknown policy 'ring'"),
    "unknown algorithm": (["train", CONFIG, "--set", "algorithm=sacc"], "unknown algorithm 'sacc'"),
    "graph": (["graph", CONFIG, "--set", "algo.nope=1"], "unknown config key 'algo.nope'"),
    "compare policy": (["compare", CONFIG, "--policies", "local,rong"], "unknown policy 'rong'"),
    "compare sweep": (
        ["compare", CONFIG, "--policies", "local", "--set", "algo.nope=1,2"],
        "unknown config key 'algo.nope'",
    ),
}


def run_msrl(args: list[str]) -> tuple[dict, str, float]:
    """``python -m msrl ARGS`` in a fresh interpreter: its exit code and heavy modules, its stderr,
    and the seconds from start to end."""
    script = RUN_AND_REPORT.format(heavy=repr(HEAVY))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr, elapsed


@pytest.mark.parametrize("name", list(CONFIG_ERRORS))
def test_a_config_error_answers_before_any_heavy_import(name: str) -> None:
    args, words = CONFIG_ERRORS[name]
    report, stderr, elapsed = run_msrl(args)
    assert report["code"] == 2, stderr
    assert stderr.startswith("msrl: error: ") and words in stderr and stderr.count("\n") == 1, stderr
    assert report["heavy"] == [], f"a config error imported {report['heavy']}"
    assert elapsed < LIMIT_S * MARGIN, f"{elapsed:.2f} s for a config error"
