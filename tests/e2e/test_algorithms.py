"""Every built-in algorithm resumes exactly from a mid-run checkpoint and refuses an action space it
does not support in one line (that each learns with its config: test_algorithm_learning.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import msrl
from msrl.app import Trainer, read_metrics

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def test_impala_config_runs_under_the_async_preset() -> None:
    assert msrl.app.load_config(str(CONFIGS / "impala_cartpole.yaml")).run.policy == "async_single_learner"


# name -> overrides giving a few iterations with updates (past any warm-up)
RESUME = {
    "a2c_cartpole": ["total_env_steps=640", "algo.anneal_lr=false", "algo.num_envs=16"],
    "a3c_cartpole": ["total_env_steps=640", "policy=local"],  # its actor's weights version included
    "pg_cartpole": ["total_env_steps=4000", "algo.num_steps=100"],
    "ac_cartpole": ["total_env_steps=64"],
    "apex_dqn_cartpole": ["total_env_steps=1000", "algo.learning_starts=300", "algo.gradient_steps=4"],
    "dqn_cartpole": ["total_env_steps=1536", "algo.learning_starts=256", "algo.gradient_steps=4"],
    "ppo_pendulum": ["total_env_steps=8192", "algo.anneal_lr=false", "algo.update_epochs=1"],
    "sac_pendulum": (  # 24 iterations of 4 envs x 4 steps (the shipped one env would make 384)
        "total_env_steps=384 algo.num_envs=4 algo.train_frequency=4 algo.hidden_sizes=[64,64] "
        "algo.learning_starts=64 algo.gradient_steps=2"
    ).split(),
    "td3_pendulum": (  # as SAC's: 24 iterations of 4 envs x 4 steps, past a short warm-up
        "total_env_steps=384 algo.num_envs=4 algo.train_frequency=4 algo.hidden_sizes=[64,64] "
        "algo.learning_starts=64 algo.gradient_steps=2 algo.buffer_size=1000"
    ).split(),
    "impala_cartpole": ["total_env_steps=5120", "algo.anneal_lr=false", "policy=local"],
    "mappo_simple_spread": ["total_env_steps=4000", "algo.update_epochs=2", "algo.num_envs=32"],
    "ippo_tag": ["total_env_steps=8000", "algo.update_epochs=1", "algo.env_kwargs.max_episode_steps=60"],
    # 5 iterations of 4 episodes, updates from the second on: the replay's episodes in progress, the
    # actor's GRU memories and epsilon, the reward statistics and the target networks
    "qmix_simple_spread": (
        "total_env_steps=500 algo.num_envs=4 algo.batch_size=4 algo.gradient_steps=2 algo.target_update_interval=3"
    ).split(),
    "maddpg_simple_spread": (  # as QMIX's, and the learner's Gumbel noise
        "total_env_steps=500 algo.num_envs=4 algo.batch_size=4 algo.gradient_steps=2 algo.target_update_interval=3"
    ).split(),
}


@pytest.mark.parametrize("name", sorted(RESUME))
def test_a_copy_resumed_from_a_mid_run_checkpoint_ends_as_the_run_did(name: str, tmp_path: Path) -> None:
    """Replay buffers, epsilon schedules, running normalisation statistics and every generator are in
    the checkpoint: the resumed copy's records equal the uninterrupted run's."""
    common = [f"runs_dir={tmp_path}", "progress=false", "eval_episodes=0", "checkpoint_every=2", *RESUME[name]]
    with Trainer(str(CONFIGS / f"{name}.yaml"), common) as trainer:
        while not trainer.done:
            trainer.step()
            if trainer.iteration == 2:
                shutil.copytree(trainer.run_dir, tmp_path / "copy")
        straight = read_metrics(trainer.run_dir)
    resumed = msrl.train(None, [], resume=tmp_path / "copy" / "checkpoint.pt").metrics
    assert len(straight) >= 4
    drop = {"wall_time", "steps_per_s"}

    def same(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in drop and not k.startswith("time_")} for r in records]

    assert same(resumed) == same(straight)


@pytest.mark.parametrize(
    "algorithm,env_id,supported",
    [
        ("dqn", "Pendulum-v1", "dqn supports Discrete actions; Pendulum-v1 has Box actions"),
        ("sac", "CartPole-v1", "sac supports Box actions; CartPole-v1 has Discrete actions"),
    ],
)
def test_an_unsupported_action_space_is_one_line(algorithm: str, env_id: str, supported: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "msrl",
            "train",
            str(CONFIGS / f"{algorithm}_{'cartpole' if algorithm == 'dqn' else 'pendulum'}.yaml"),
            "--set",
            f"algo.env_id={env_id}",
            "--set",
            f"runs_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"msrl: error: {supported}"
    assert len(result.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_an_unknown_env_names_close_matches(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "msrl",
            "train",
            str(CONFIGS / "sac_pendulum.yaml"),
            "--set",
            "algo.env_id=Pendulum-v9",
            "--set",
            f"runs_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.startswith("msrl: error:") and "Pendulum-v1" in line and "\n" not in line
