"""``msrl train --address`` joins a Ray cluster that is already running, as a user's
``ray start --head`` makes one, instead of starting its own: the run's workers
live in that cluster and the cluster outlives the run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from cluster import CLUSTER_SWITCH  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "ppo_cartpole.yaml"
RAY_BIN = Path(sys.executable).with_name("ray")
# The head node, and the clients joining it, on 127.0.0.1: the test never touches the network.
# (Ray otherwise rewrites 127.0.0.1 in an address to the machine's network address.)
LOOPBACK_ENV = {**os.environ, CLUSTER_SWITCH: "0"}
# Joining by explicit address, Ray sends its token only when told to (RAY_AUTH_MODE=token); the
# token is the one `ray start` left in ~/.ray/auth_token.  Authentication stays on throughout.
CLIENT_ENV = {**LOOPBACK_ENV, "RAY_AUTH_MODE": "token"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _head_node(dashboard_port: int | None = None) -> Iterator[str]:
    """A head node started by the ``ray`` CLI in the foreground (``--block``), so that
    stopping this process stops exactly this cluster and nothing else on the machine.
    Its processes find ``msrl`` and this Python on PATH, as in an activated venv."""
    if not RAY_BIN.exists():
        pytest.skip(f"the ray CLI is not installed next to {sys.executable}")
    ray.shutdown()
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="msrl-ray-")  # its own sessions, on a short path (Unix sockets live there)
    dashboard = (
        ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
        if dashboard_port
        else ["--include-dashboard=false"]
    )
    env = {**LOOPBACK_ENV, "PATH": f"{RAY_BIN.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(
        [
            str(RAY_BIN),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=3",
            *dashboard,
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    address = f"127.0.0.1:{port}"
    try:
        for wanted in [port] + ([dashboard_port] if dashboard_port else []):
            _wait_for_port(proc, wanted)
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import ray; ray.init(address='{address}', logging_level='ERROR');"
                "print(int(ray.cluster_resources().get('CPU', 0)))",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=CLIENT_ENV,
        )
        assert probe.stdout.strip().endswith("3"), f"cannot join the head node: {probe.stderr[-2000:]}"
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_for_port(proc: subprocess.Popen, port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, f"ray start exited: {proc.stdout.read()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"the head node did not open port {port} within {timeout_s:.0f} s"
            time.sleep(0.5)


@pytest.fixture()
def head_node() -> Iterator[str]:
    with _head_node() as address:
        yield address


@pytest.mark.slow  # the default suite joins a `ray start` cluster by address in tests/multihost/test_two_hosts.py
def test_train_joins_a_running_cluster(head_node: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "msrl",
        "train",
        str(CONFIG),
        "--address",
        head_node,
        "--set",
        "policy=single_learner_coarse",
        "--set",
        f"runs_dir={runs}",
        "--set",
        "total_env_steps=8192",
        "--set",
        "eval_episodes=2",
        "--set",
        "progress=false",
        "--set",
        "checkpoint_every=0",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO, env=CLIENT_ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "asks for" not in done.stderr  # no embedded instance was sized or started
    (run_dir,) = runs.iterdir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] >= 8192 and records[-1]["time_communication"] > 0
    # the cluster outlives the run, with its CPUs free again
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import ray, time; ray.init(address='{head_node}', logging_level='ERROR');"
            "deadline = time.monotonic() + 30\n"
            "while ray.available_resources().get('CPU', 0) < 3 and time.monotonic() < deadline: time.sleep(0.1)\n"
            "print(int(ray.available_resources().get('CPU', 0)))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=CLIENT_ENV,
    )
    assert check.stdout.strip().endswith("3"), check.stderr[-2000:]


@pytest.mark.slow  # a head node with its dashboard and a job's runtime environment: about 40 s on 2 cores
def test_ray_job_submit_runs_msrl_unchanged(tmp_path: Path) -> None:
    """DESIGN's promise: ``ray job submit --working-dir . -- msrl train CONFIG --address auto``."""
    dashboard_port = _free_port()
    runs = tmp_path / "runs"
    with _head_node(dashboard_port):
        submit = subprocess.run(
            [
                str(RAY_BIN),
                "job",
                "submit",
                "--address",
                f"http://127.0.0.1:{dashboard_port}",
                "--working-dir",
                ".",
                "--",
                "msrl",
                "train",
                "configs/ppo_cartpole.yaml",
                "--address",
                "auto",
                "--set",
                "policy=single_learner_coarse",
                "--set",
                "total_env_steps=8192",
                "--set",
                "eval_episodes=2",
                "--set",
                "progress=false",
                "--set",
                f"runs_dir={runs}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env=CLIENT_ENV,
        )
    assert submit.returncode == 0, (submit.stdout + submit.stderr)[-3000:]
    assert "greedy evaluation return" in submit.stdout
    (run_dir,) = runs.iterdir()
    assert (run_dir / "metrics.jsonl").read_text().count("\n") >= 4


@pytest.mark.slow  # a head node with its dashboard, a job stopped mid-run and its logs: about 60 s on 2 cores
def test_ray_job_stop_checkpoints_the_run_and_names_its_resume_command(tmp_path: Path) -> None:
    """``ray job stop`` sends the job's driver SIGTERM: the run checkpoints at the iteration's end
    and its log names the checkpoint and the ``--resume`` command, inside the time the job's
    ``RAY_JOB_STOP_WAIT_TIME_S`` gives it before Ray's SIGKILL."""
    dashboard_port = _free_port()
    address = f"http://127.0.0.1:{dashboard_port}"
    runs = tmp_path / "runs"
    job = "msrl-stop-test"

    def ray_job(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(RAY_BIN), "job", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=CLIENT_ENV
        )

    with _head_node(dashboard_port):
        submit = ray_job(
            *("submit", "--address", address, "--submission-id", job, "--no-wait", "--working-dir", "."),
            *("--runtime-env-json", json.dumps({"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "60"}})),
            *("--", "msrl", "train", "configs/ppo_cartpole.yaml", "--address", "auto"),
            *("--set", "total_env_steps=100000000", "--set", "progress=false", "--set", f"runs_dir={runs}"),
        )
        assert submit.returncode == 0, (submit.stdout + submit.stderr)[-3000:]
        metrics = runs / "ppo_cartpole" / "metrics.jsonl"
        deadline = time.monotonic() + 180
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert time.monotonic() < deadline, ray_job("logs", "--address", address, job).stdout[-3000:]
            time.sleep(0.2)
        stop = ray_job("stop", "--address", address, job)
        assert stop.returncode == 0, (stop.stdout + stop.stderr)[-3000:]
        logs = ray_job("logs", "--address", address, job).stdout
        status = ray_job("status", "--address", address, job).stdout
    checkpoint = runs / "ppo_cartpole" / "checkpoint.pt"
    assert f"Job {job!r} was stopped" in status, status[-2000:]
    assert f"continue with: msrl train --resume {checkpoint}" in logs, logs[-3000:]
    from msrl.app import load_checkpoint

    assert load_checkpoint(str(checkpoint))["iteration"] == metrics.read_text().count("\n")
