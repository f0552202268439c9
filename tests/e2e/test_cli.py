"""The ``msrl`` command line end to end, as subprocesses: train, a second run of
the same name, eval, exact resume, and bad input of every kind ending in one
``msrl: error:`` line with exit status 2 and nothing written (``msrl graph`` is in
``test_cli_graph.py``).

Each subprocess spends most of its time importing torch, so the commands run in
two concurrent waves from one module fixture and the tests check the results.
Commands that need no process of their own (eval, a second run of a name, bad
input) run through ``msrl.app.main`` in this process meanwhile: the code the
``msrl`` command runs.  One config error and one checkpoint error also go through
a real ``python -m msrl``, to check the exit status end to end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import CONFIG, REPO, assert_one_error_line, explain, in_process

TIMEOUT_S = 240

# The shipped config, as is but for a 4096-step budget.
SHIPPED = yaml.safe_load((REPO / CONFIG).read_text())
SHORT = [
    "--set",
    "name=short",
    "--set",
    "total_env_steps=4096",
    "--set",
    "eval_episodes=2",
    "--set",
    "checkpoint_every=1",
]
SHORT_BATCH = SHIPPED["algo"]["num_envs"] * SHIPPED["algo"]["num_steps"]
SHORT_ITERATIONS = -(-4096 // SHORT_BATCH)

# Resume runs: a small, un-annealed PPO (annealing would tie the schedule to total_env_steps).
NUM_ENVS, NUM_STEPS = 4, 16
PER_ITERATION = NUM_ENVS * NUM_STEPS
SMALL = [
    "--set",
    f"algo.num_envs={NUM_ENVS}",
    "--set",
    f"algo.num_steps={NUM_STEPS}",
    "--set",
    "algo.update_epochs=2",
    "--set",
    "algo.num_minibatches=4",
    "--set",
    "algo.anneal_lr=false",
    "--set",
    "eval_episodes=0",
    "--set",
    "checkpoint_every=3",
    "--set",
    "progress=false",
]
LOSS_KEYS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "learning_rate", "env_steps")


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "msrl", *args], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, env=env
    )


def run_all(
    jobs: dict[str, list[str]], here: dict[str, list[str]] | None = None
) -> dict[str, subprocess.CompletedProcess]:
    """``jobs`` as concurrent subprocesses and, meanwhile, ``here`` one by one in this process."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(cli, *args) for key, args in jobs.items()}
        done = {}
        if here:
            cwd = os.getcwd()
            os.chdir(REPO)  # relative paths as in the subprocesses
            try:
                done = {key: in_process(*args) for key, args in here.items()}
            finally:
                os.chdir(cwd)
        return {**done, **{key: future.result() for key, future in futures.items()}}


def read_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def assert_identical(a, b, path: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: keys differ"
        for key in a:
            assert_identical(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a, b), f"{path}: tensors differ"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


# name -> (argv after the runs_dir override, words the error line must contain)
BAD_CONFIG = {
    "unknown algorithm": (
        ["train", CONFIG, "--set", "algorithm=sacc"],
        [
            "unknown algorithm 'sacc'",
            "a2c, a3c, ac, apex_dqn, awac, cql, ddpg, dqn, gail, impala, ippo, iql, maddpg, mappo, pg, ppo, qmix, sac, "
            "td3, vdn",
        ],
    ),
    "unknown policy": (["train", CONFIG, "--set", "policy=ring"], ["unknown policy 'ring'", "local"]),
    "unknown config key": (
        ["train", CONFIG, "--set", "bogus_key=1"],
        ["unknown config key 'bogus_key'", "total_env_steps"],
    ),
    "wrong type": (["train", CONFIG, "--set", "seed=abc"], ["seed must be int", "'abc'"]),
    "missing config file": (
        ["train", "configs/does_not_exist.yaml"],
        ["config file", "does_not_exist.yaml", "not found"],
    ),
    "unknown CLI flag": (["train", CONFIG, "--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    "unknown environment": (
        ["train", CONFIG, "--set", "algo.env_id=Acrobat-v1"],
        ["unknown environment 'Acrobat-v1'", "close matches: Acrobot-v1"],
    ),
}
IN_A_SUBPROCESS = {"missing config file", "resume truncated checkpoint"}
BAD_CHECKPOINT = {
    "resume garbage checkpoint": ("train", "garbage.pt"),
    "eval garbage checkpoint": ("eval", "garbage.pt"),
    "resume truncated checkpoint": ("train", "truncated.pt"),
    "eval truncated checkpoint": ("eval", "truncated.pt"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    runs_dir, bad_runs = root / "runs", root / "bad_runs"
    at = ["--set", f"runs_dir={runs_dir}"]

    # A runs straight through in this process; B runs half in a subprocess and is resumed in another.
    first = run_all(
        {
            "short": ["train", CONFIG, *at, *SHORT],
            "B": ["train", CONFIG, *at, *SMALL, "--set", "name=B", "--set", f"total_env_steps={3 * PER_ITERATION}"],
        },
        here={
            "A": ["train", CONFIG, *at, *SMALL, "--set", "name=A", "--set", f"total_env_steps={6 * PER_ITERATION}"],
        },
    )
    for key in ("short", "A", "B"):
        assert first[key].returncode == 0, f"{key}: {explain(first[key])}"
    short_files = read_bytes(runs_dir / "short")
    b_before_resume = records(runs_dir / "B")

    # A copy of a real run directory, with broken checkpoints next to the real one.
    victim = root / "victim"
    shutil.copytree(runs_dir / "short", victim)
    real = (victim / "checkpoint.pt").read_bytes()
    (victim / "garbage.pt").write_bytes(b"\x00not a checkpoint\xff" * 64)
    (victim / "truncated.pt").write_bytes(real[: len(real) // 2])
    victim_files = read_bytes(victim)

    here = {
        "short again": [
            "train",
            CONFIG,
            *at,
            *SMALL,
            "--set",
            "name=short",
            "--set",
            f"total_env_steps={PER_ITERATION}",
        ],
        "eval": ["eval", str(runs_dir / "short" / "checkpoint.pt"), "--episodes", "3"],
    }
    for name, (argv, _) in BAD_CONFIG.items():
        here[name] = [*argv, "--set", f"runs_dir={bad_runs}"]
    for name, (command, file) in BAD_CHECKPOINT.items():
        here[name] = ["train", "--resume", str(victim / file)] if command == "train" else ["eval", str(victim / file)]
    # Exact resume across processes, and one error of each kind through a real ``python -m msrl``.
    jobs = {
        "B resume": [
            "train",
            "--resume",
            str(runs_dir / "B" / "checkpoint.pt"),
            "--set",
            f"total_env_steps={6 * PER_ITERATION}",
        ]
    }
    jobs.update((name, here.pop(name)) for name in IN_A_SUBPROCESS)
    second = run_all(jobs, here)
    return {
        **first,
        **second,
        "root": root,
        "runs_dir": runs_dir,
        "bad_runs": bad_runs,
        "victim": victim,
        "victim_files": victim_files,
        "short_files": short_files,
        "B before resume": b_before_resume,
    }


# -- train ----------------------------------------------------------------------------------------------
def test_train_writes_the_run_directory(runs):
    result, run_dir = runs["short"], runs["runs_dir"] / "short"
    assert result.returncode == 0, explain(result)
    names = sorted(p.name for p in run_dir.iterdir() if p.name != ".lock")  # the run's lock (test_run_directory.py)
    events = [n for n in names if n.startswith("events.out.tfevents.")]  # TensorBoard's (test_tensorboard.py)
    assert len(events) == 1
    assert [n for n in names if n not in events] == ["checkpoint.pt", "config.yaml", "eval.json", "metrics.jsonl"]

    rows = records(run_dir)
    assert [r["iteration"] for r in rows] == list(range(1, SHORT_ITERATIONS + 1))
    assert [r["env_steps"] for r in rows] == [SHORT_BATCH * i for i in range(1, SHORT_ITERATIONS + 1)]
    for row in rows:
        for key in (
            "policy_loss",
            "value_loss",
            "entropy",
            "time_env",
            "time_inference",
            "time_learn",
            "time_communication",
            "wall_time",
            "steps_per_s",
        ):
            assert isinstance(row[key], float), (key, row)
        assert row["time_communication"] == 0.0  # local policy: nothing crosses processes
        assert row["time_env"] > 0 and row["time_learn"] > 0
        if "episodes" in row:
            assert row["episode_return"] > 0
    assert "episode_return" in rows[0]  # dozens of random CartPoles finish episodes within the first rollout

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["total_env_steps"] == 4096 and config["checkpoint_every"] == 1 and config["name"] == "short"
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert (checkpoint["iteration"], checkpoint["env_steps"]) == (SHORT_ITERATIONS, SHORT_ITERATIONS * SHORT_BATCH)
    assert set(checkpoint["components"]) == {"env", "actor", "buffer", "learner"}
    assert checkpoint["config"] == config
    assert json.loads((run_dir / "eval.json").read_text())["episodes"] == 2

    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("greedy evaluation return: ") and lines[-1].endswith("over 2 episodes")
    assert f"trained {SHORT_ITERATIONS} iterations, {SHORT_ITERATIONS * SHORT_BATCH:,} env steps" in lines[0]
    assert f"msrl: run directory {run_dir} (policy local)" in result.stderr


def test_same_name_gets_a_new_directory(runs):
    result, runs_dir = runs["short again"], runs["runs_dir"]
    assert result.returncode == 0, explain(result)
    assert f"results in {runs_dir / 'short_2'}" in result.stdout
    assert [r["iteration"] for r in records(runs_dir / "short_2")] == [1]
    assert yaml.safe_load((runs_dir / "short_2" / "config.yaml").read_text())["total_env_steps"] == PER_ITERATION
    assert read_bytes(runs_dir / "short") == runs["short_files"]
    assert sorted(p.name for p in runs_dir.iterdir()) == ["A", "B", "short", "short_2"]


# -- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(BAD_CONFIG))
def test_bad_config_is_one_error_line(runs, name):
    assert_one_error_line(runs[name], BAD_CONFIG[name][1])


@pytest.mark.parametrize("name", list(BAD_CHECKPOINT))
def test_bad_checkpoint_is_one_error_line(runs, name):
    file = BAD_CHECKPOINT[name][1]
    assert_one_error_line(runs[name], ["checkpoint", str(runs["victim"] / file), "corrupt"])


def test_failed_commands_write_nothing(runs):
    assert not runs["bad_runs"].exists()
    assert read_bytes(runs["victim"]) == runs["victim_files"]  # metrics.jsonl and checkpoint.pt byte-identical
    assert sorted(p.name for p in runs["victim"].iterdir()) == sorted(runs["victim_files"])


# -- eval --------------------------------------------------------------------------------------------------
def test_eval_prints_the_greedy_return(runs):
    result = runs["eval"]
    assert result.returncode == 0, explain(result)
    assert re.fullmatch(r"greedy evaluation return: \d+\.\d ± \d+\.\d over 3 episodes\n", result.stdout), result.stdout


# -- resume ------------------------------------------------------------------------------------------------
def test_resume_is_exact(runs):
    runs_dir = runs["runs_dir"]
    assert runs["A"].returncode == 0 and runs["B"].returncode == 0
    resumed = runs["B resume"]
    assert resumed.returncode == 0, explain(resumed)
    assert f"msrl: run directory {runs_dir / 'B'}" in resumed.stderr
    assert "trained 6 iterations" in resumed.stdout
    assert [r["iteration"] for r in runs["B before resume"]] == [1, 2, 3]

    a = torch.load(runs_dir / "A" / "checkpoint.pt", weights_only=True)
    b = torch.load(runs_dir / "B" / "checkpoint.pt", weights_only=True)
    assert (a["iteration"], a["env_steps"]) == (b["iteration"], b["env_steps"]) == (6, 6 * PER_ITERATION)
    for name in ("learner", "actor", "env", "buffer"):
        assert_identical(a["components"][name], b["components"][name], name)
    assert a["components"]["learner"]["updates"] == 6

    rows_a, rows_b = records(runs_dir / "A"), records(runs_dir / "B")
    assert [r["iteration"] for r in rows_b] == [1, 2, 3, 4, 5, 6]
    assert [r["iteration"] for r in rows_a] == [1, 2, 3, 4, 5, 6]
    for row_a, row_b in zip(rows_a, rows_b):
        assert {k: row_a[k] for k in LOSS_KEYS} == {k: row_b[k] for k in LOSS_KEYS}, row_a["iteration"]
        assert row_a.get("episode_return") == row_b.get("episode_return")
    assert rows_b[:3] == runs["B before resume"]  # the first three records are kept as written
    assert sorted(p.name for p in runs_dir.iterdir()) >= ["A", "B"] and not (runs_dir / "B_2").exists()
