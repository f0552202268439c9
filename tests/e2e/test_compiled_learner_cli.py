"""Compiled steps from the command line.  Where a step cannot be built (no C++ compiler), the run
says so in one line and trains eagerly to the same result.  Where it can (``-m slow``: a cold
build is 20-40 s; the discrete case also in CI's landing tier), a run that waits for its steps
(``algo.compile: true``) builds them, the next default run (``auto``) loads them and is compiled
from its first iteration, and both learn alike, for discrete and ``Box`` actions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import REPO, explain, in_process

TIMEOUT_S = 300


def _train(tmp: Path, name: str, *args: str, compile_env: str = "false") -> subprocess.CompletedProcess:
    """``msrl train`` in its own process (``args``: a config path first, or the PPO CartPole one)."""
    config, *overrides = args if args and args[0].endswith(".yaml") else ("configs/ppo_cartpole.yaml", *args)
    sets = ["eval_episodes=0", "checkpoint_every=0", f"runs_dir={tmp / name}", *overrides]
    command = [sys.executable, "-m", "msrl", "train", config, *(arg for s in sets for arg in ("--set", s))]
    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "cache"), "MSRL_COMPILE": compile_env}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, env=environment)


def _records(tmp: Path, name: str) -> list[dict]:
    (path,) = (tmp / name).glob("*/metrics.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _losses(records: list[dict]) -> list[tuple[float, float]]:
    return [(r["policy_loss"], r["value_loss"]) for r in records if "policy_loss" in r]


def _close(got: tuple[float, float], expected: tuple[float, float]) -> None:
    assert got == pytest.approx(expected, rel=1e-3, abs=1e-5)


SHORT = ("total_env_steps=4096", "algo.num_envs=8", "algo.num_steps=128")


@pytest.mark.landing  # two CLI runs, one trying to build with a missing compiler: 30-45 s, beside the other builds
def test_without_a_compiler_the_run_says_so_and_trains_eagerly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))  # what inductor's build process compiles with
    one_update = ["total_env_steps=1024", "algo.num_envs=8", "algo.num_steps=128", "progress=false"]
    runs = {}
    for name, compile_option in (("eager", "false"), ("broken", "true")):
        sets = [*one_update, f"algo.compile={compile_option}", f"runs_dir={tmp_path / name}", "eval_episodes=0"]
        runs[name] = in_process("train", "configs/ppo_cartpole.yaml", *(a for s in sets for a in ("--set", s)))
        assert runs[name].returncode == 0, explain(runs[name])
    lines = [line for line in runs["broken"].stderr.splitlines() if "could not be built" in line]
    assert len(lines) == 1, explain(runs["broken"])  # once for the run, though the actor's and the learner's failed
    assert lines[0].startswith("msrl: a compiled step could not be built") and lines[0].endswith("running it eagerly")
    assert "no-such-compiler" in Path(lines[0].split("the build's log: ")[1].split(")")[0]).read_text()
    _close(_losses(_records(tmp_path, "broken"))[0], _losses(_records(tmp_path, "eager"))[0])
    assert not list((tmp_path / "cache").rglob("*.pt2"))  # nothing half-built left to load later


@pytest.mark.slow
@pytest.mark.parametrize(
    "sets",
    [
        pytest.param(SHORT, id="discrete", marks=pytest.mark.landing),
        pytest.param(("configs/ppo_pendulum.yaml", "total_env_steps=4096"), id="box"),
    ],
)
def test_built_steps_are_loaded_by_the_next_run_and_learn_like_eager(tmp_path: Path, sets: tuple[str, ...]) -> None:
    eager = _train(tmp_path, "eager", *sets, "progress=false", "algo.compile=false")
    first = _train(tmp_path, "first", *sets, "progress=false", "algo.compile=true")
    assert eager.returncode == 0 and first.returncode == 0, explain(first)
    packages = sorted((tmp_path / "cache").rglob("*.pt2"))
    assert len(packages) == 3, "the first run built its actor's draw, its learner's step and its diagnostics"
    stamps = [p.stat().st_mtime_ns for p in packages]
    second = _train(tmp_path, "second", *sets, compile_env="auto")  # a default run, with its progress bar
    assert second.returncode == 0, explain(second)
    assert sorted((tmp_path / "cache").rglob("*.pt2")) == packages
    assert [p.stat().st_mtime_ns for p in packages] == stamps  # loaded, not built again
    first_records, second_records = _records(tmp_path, "first"), _records(tmp_path, "second")
    assert not any("compiling" in r for r in second_records)  # compiled from its first iteration
    assert "compiling" not in second.stderr and "switching" not in second.stderr
    assert _losses(second_records) == _losses(first_records)  # the same library, the same arithmetic
    # after the first update the two differ by float rounding only (it grows over later updates)
    _close(_losses(first_records)[0], _losses(_records(tmp_path, "eager"))[0])
