"""What a policy may ask of the embedded Ray and of this machine: up to 4 logical CPUs per core
(its fragments take turns), beyond that one line and exit 2 before Ray starts; and a ``local``
policy asking for a million CPUs trains on as many threads as there are cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import msrl

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")


@pytest.mark.parametrize(
    "sets, asked",
    [
        (["policy.actors=16"], 17),
        (["policy.actor_cpus=1000000"], 2_000_001),
    ],
    ids=["16-replicas", "a-million-cpus-each"],
)
def test_more_than_four_cpus_per_core_on_the_embedded_ray_is_one_line_exit_2(
    sets: list[str], asked: int, tmp_path: Path
) -> None:
    cores = os.cpu_count() or 1
    if asked <= 4 * cores:
        pytest.skip(f"this machine's {cores} cores can run {asked} CPUs' worth of fragments")
    overrides = [arg for s in ["policy=single_learner_coarse", "algo.num_envs=16", *sets] for arg in ("--set", s)]
    proc = subprocess.run(
        [sys.executable, "-m", "msrl", "train", CONFIG, *overrides, "--set", f"runs_dir={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"msrl: error: policy 'single_learner_coarse' asks for {asked} CPUs; the embedded Ray on this {cores}-core "
        f"machine offers at most {4 * cores} (4 per core): use fewer replicas or CPUs per replica, or join a cluster "
        f"with --address"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_local_policy_asking_for_a_million_cpus_trains_on_the_cores_there_are(tmp_path: Path) -> None:
    run = msrl.train(
        CONFIG,
        [f"runs_dir={tmp_path}", "policy.cpus=1000000", "total_env_steps=2048", "eval_episodes=1", "progress=false"],
    )
    assert run.env_steps == 2048 and run.evaluation.episodes == 1
