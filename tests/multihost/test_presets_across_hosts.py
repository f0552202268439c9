"""Every Ray preset across three hosts (slow tier): PPO CartPole to its threshold with the
replicas spread over the hosts, the same result as on one host where a preset is exact, the
guide's own algorithm under a spread preset, and ``ray job submit`` from another host.  Run with
``pytest -m slow tests/multihost``."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from multihost_helpers import REPO, output, train_command

import msrl
from testbed import Testbed

pytestmark = pytest.mark.slow

PRESETS = {  # the Ray presets (local runs in one process)
    "single_learner_coarse": ["policy=single_learner_coarse"],
    "single_learner_fine": ["policy=single_learner_fine"],
    "multi_learner": ["policy=multi_learner"],
    "gpu_only": ["policy=gpu_only", "policy.device=cpu"],  # one fragment: it runs on one host
    "async_single_learner": ["policy=async_single_learner"],
}
SPREAD = {  # across the hosts: each replica on a host of its own where the preset has several
    "single_learner_coarse": ["policy.placement=SPREAD"],
    "single_learner_fine": ["policy.placement=SPREAD"],
    "multi_learner": ["policy.placement=STRICT_SPREAD"],
    "async_single_learner": ["policy.placement=SPREAD"],
}
EXACT = {"single_learner_coarse", "single_learner_fine", "gpu_only"}
"""The presets that repeat a run exactly: on one host or three, the same seed gives the same
losses and returns.  Not multi_learner: two of its runs on one host already differ from the second
iteration on (its first iteration across hosts equals the one-host run's)."""
KEYS = ["env_steps", "policy_loss", "value_loss", "episode_return"]


@pytest.fixture(scope="module")
def bed() -> Iterator[Testbed]:
    with Testbed(hosts=3, cpus=2, dashboard=True) as testbed:
        yield testbed


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_learns_across_hosts(preset: str, bed: Testbed, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    overrides = [*PRESETS[preset], *SPREAD.get(preset, [])]
    done = bed.run(0, train_command(bed.head_address, runs, "eval_episodes=20", *overrides), cwd=str(REPO))
    text = output(done)
    assert done.returncode == 0, text[-3000:]
    hosts = set(re.findall(r"fragment \w+\[\d\] on node ([0-9.]+) ", text))
    replicas = len(re.findall(r"fragment \w+\[\d\] on node ", text))
    assert len(hosts) >= min(2, replicas), text  # spread wherever there is more than one replica
    greedy = float(re.search(r"greedy evaluation return: ([-0-9.]+)", text).group(1))
    assert greedy >= 475, text[-2000:]
    if preset in EXACT:  # the same run on one host (placement changes where, not what): this process's Ray
        one_host = msrl.train(
            str(REPO / "configs" / "ppo_cartpole.yaml"),
            [f"runs_dir={tmp_path / 'one'}", "progress=false", "eval_episodes=20", *PRESETS[preset]],
        )
        across = _records(runs / "ppo_cartpole")
        assert [[r.get(k) for k in KEYS] for r in across] == [[r.get(k) for k in KEYS] for r in one_host.metrics]


def test_the_guides_algorithm_runs_across_hosts(bed: Testbed, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "msrl",
        "train",
        "examples/reinforce_cartpole.yaml",
        "--address",
        bed.head_address,
        *("--set", f"runs_dir={runs}", "--set", "progress=false", "--set", "eval_episodes=2"),
        *("--set", "total_env_steps=8192", "--set", "policy=single_learner_coarse", "--set", "policy.placement=SPREAD"),
    ]
    done = bed.run(0, command, cwd=str(REPO))
    text = output(done)
    assert done.returncode == 0, text[-3000:]
    assert len(set(re.findall(r"fragment \w+\[\d\] on node ([0-9.]+) ", text))) >= 2, text


def test_ray_job_submit_from_another_host(bed: Testbed, tmp_path: Path) -> None:
    """``ray job submit`` from host 1 to the head's job address, the repository as working dir: the
    job's driver runs on the head, so its run directory is on the head's filesystem."""
    runs = tmp_path / "runs"
    submit = [
        str(Path(sys.executable).with_name("ray")),
        *("job", "submit", "--address", bed.job_address, "--working-dir", str(REPO), "--"),
        *("msrl", "train", "configs/ppo_cartpole.yaml", "--address", "auto"),
        *("--set", "policy=single_learner_coarse", "--set", "policy.placement=SPREAD"),
        *("--set", "total_env_steps=8192", "--set", "eval_episodes=2", "--set", "progress=false"),
        *("--set", f"runs_dir={runs}"),
    ]
    done = bed.run(1, submit, cwd=str(REPO), timeout=400)
    text = output(done)
    assert done.returncode == 0 and re.search(r"Job .raysubmit_\w+. succeeded", text), text[-3000:]
    assert "greedy evaluation return" in text
    run_dir = runs / "ppo_cartpole"
    assert _records(run_dir)[-1]["env_steps"] == 8192 and (run_dir / "checkpoint.pt").exists()
    assert bed.run(1, ["test", "-e", str(runs)]).returncode == 1  # not on the submitting host
