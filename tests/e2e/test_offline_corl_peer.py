"""``benchmarks.offline_learning --corl`` runs CORL's own offline files on msrl's datasets through
stand-ins for gym, d4rl and wandb (``benchmarks/peers/corl``).  A stand-in CORL file here uses them
as CORL's do: the dataset's transitions as D4RL's ``qlearning_dataset`` gives them, gym's old
environment API over gymnasium, and an evaluation logged as D4RL's normalised score, which the
benchmark turns back into the greedy return."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from data_helpers import played_pendulum_data

import benchmarks.offline_learning as offline
from msrl.data import read_episodes

CORL_FILE = textwrap.dedent(
    """
    import sys

    import d4rl
    import gym
    import numpy as np
    import wandb

    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    env = gym.make("pendulum-random-v2")
    data = d4rl.qlearning_dataset(env)
    count = len(data["observations"])
    assert count == int(args["--buffer_size"]), (count, args)
    assert all(len(data[key]) == count for key in data)
    same = (data["next_observations"][:-1] == data["observations"][1:]).all(axis=1)
    assert same.sum() == count - EPISODES, same.sum()  # each step's next observation is the next step's
    assert data["terminals"].sum() == 0  # Pendulum's episodes are cut by the time limit, never ended

    env = gym.wrappers.TransformObservation(env, lambda obs: obs * 2.0)
    env.seed(int(args["--seed"]))
    obs, done, total, steps = env.reset(), False, 0.0, 0
    while not done:
        obs, reward, done, _ = env.step(np.zeros(env.action_space.shape, dtype=np.float32))
        total, steps = total + reward, steps + 1
    assert steps == 200 and abs(obs[0] ** 2 + obs[1] ** 2 - 4.0) < 1e-5  # cut at 200; cos and sin doubled
    wandb.init(config={})
    wandb.run.save()
    wandb.log({"loss": 1.0}, step=0)
    wandb.log({"d4rl_normalized_score": env.get_normalized_score(total) * 100.0}, step=int(args["--max_timesteps"]))
    """
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return played_pendulum_data(tmp_path_factory.mktemp("data"), episodes=3)


def test_a_corl_file_trains_on_msrls_dataset_and_its_evaluation_is_read_back(dataset: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "corl"
    (checkout / "algorithms" / "offline").mkdir(parents=True)
    count = len(list(read_episodes(dataset)))
    (checkout / "algorithms" / "offline" / "iql.py").write_text(f"EPISODES = {count}\n" + CORL_FILE)
    args = argparse.Namespace(corl=str(checkout), corl_path=[], gradient_steps=7, eval_episodes=1)
    record = offline.corl_run("iql", "random", dataset, 4, {"random": -1200.0, "expert": -150.0}, args)

    env = gymnasium.make("Pendulum-v1")  # the stand-in file's episode: seed 4, zero torque
    env.reset(seed=4)
    expected = sum(float(env.step(np.zeros(1, dtype=np.float32))[1]) for _ in range(200))
    assert record["greedy_return"] == pytest.approx(expected, rel=1e-9)
    assert record["policy"] == "corl" and record["seed"] == 4 and record["gradient_steps"] == 7


def test_a_failing_corl_file_is_one_error_with_its_output(dataset: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "corl"
    (checkout / "algorithms" / "offline").mkdir(parents=True)
    (checkout / "algorithms" / "offline" / "awac.py").write_text("raise RuntimeError('no data here')\n")
    args = argparse.Namespace(corl=str(checkout), corl_path=[], gradient_steps=7, eval_episodes=1)
    with pytest.raises(SystemExit, match=r"CORL's awac run failed \(exit 1\):\n(.|\n)*no data here"):
        offline.corl_run("awac", "medium", dataset, 1, {"random": -1200.0, "expert": -150.0}, args)
