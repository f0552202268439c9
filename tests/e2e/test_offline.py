"""Learning from data end to end: ``msrl record`` writes a checkpoint's episodes as a dataset Minari's
format holds (random actions with ``--epsilon 1``, noise on Box actions), ``msrl merge`` joins datasets of one
environment into a mixed one, ``msrl train`` trains
``iql`` from a dataset with no environment in its loop, counting the transitions it trains on and
evaluating on the dataset's environment, the same seed gives the same run twice, two learners
sharding the dataset step as one learner with their batch, a resumed run reads the same dataset or
stops, and every bad dataset or option is one line, exit 2, with the dataset and earlier results
intact."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import REPO, assert_one_error_line, explain, in_process

import msrl
from msrl.core import Box, Discrete
from msrl.data import read_episodes, read_info

PPO = [
    "progress=false",
    "total_env_steps=512",
    "algo.num_envs=8",
    "algo.num_steps=32",
    "algo.num_minibatches=4",
    "algo.anneal_lr=false",
    "eval_episodes=0",
]
IQL = ["progress=false", "total_env_steps=5120", "algo.gradient_steps=5", "algo.batch_size=64", "eval_episodes=3"]
IQL += ["algo.hidden_sizes=[32, 32]", "checkpoint_every=4"]


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> msrl.Run:
    runs = tmp_path_factory.mktemp("runs")
    return msrl.train(str(REPO / "configs/ppo_cartpole.yaml"), [f"runs_dir={runs}", *PPO])


@pytest.fixture(scope="module")
def ddpg(tmp_path_factory: pytest.TempPathFactory) -> msrl.Run:
    """An untrained DDPG on Pendulum (8 env steps): a Box-action checkpoint to record from."""
    runs = tmp_path_factory.mktemp("runs")
    overrides = ["progress=false", "total_env_steps=8", "eval_episodes=0", "algo.learning_starts=100"]
    overrides += ["algo.hidden_sizes=[8, 8]", "algo.compile=false"]
    return msrl.train(str(REPO / "configs/ddpg_pendulum.yaml"), [f"runs_dir={runs}", *overrides])


@pytest.fixture(scope="module")
def pendulum_data(ddpg: msrl.Run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Pendulum dataset of random actions."""
    out = tmp_path_factory.mktemp("data") / "pendulum-random"
    result = in_process("record", ddpg.checkpoint, "--episodes", "8", "--out", str(out), "--epsilon", "1")
    assert result.returncode == 0, explain(result)
    return out


def test_record_writes_whole_episodes_of_the_checkpoints_policy(cartpole: msrl.Run, tmp_path: Path) -> None:
    out = tmp_path / "cartpole"
    result = in_process("record", cartpole.checkpoint, "--episodes", "5", "--out", str(out), "--envs", "3")
    assert result.returncode == 0, explain(result)
    assert "recorded 5 episodes" in result.stdout and str(out) in result.stdout
    info = read_info(out)
    assert (info.observation_space, info.action_space, info.env_id) == (
        Box(info.observation_space.low, info.observation_space.high, (4,)),
        Discrete(2),
        "CartPole-v1",
    )
    episodes = read_episodes(out)
    assert len(episodes) == 5 and all(e.terminations[-1] or e.truncations[-1] for e in episodes)
    assert sum(e.steps for e in episodes) == info.total_steps
    meta = json.loads((out / "data" / "metadata.json").read_text())
    assert meta["algorithm_name"] == "ppo" and meta["msrl_epsilon"] == 0.0
    # the greedy policy's episodes: the same seed records the same dataset again
    again = tmp_path / "again"
    result = in_process("record", cartpole.checkpoint, "--episodes", "5", "--out", str(again), "--envs", "3")
    assert result.returncode == 0, explain(result)
    for a, b in zip(episodes, read_episodes(again)):
        np.testing.assert_array_equal(a.actions, b.actions)


def test_gail_imitates_demonstrations_counting_only_the_environments_steps(cartpole: msrl.Run, tmp_path: Path) -> None:
    demos = tmp_path / "demos"
    assert in_process("record", cartpole.checkpoint, "--episodes", "8", "--out", str(demos)).returncode == 0
    overrides = [f"runs_dir={tmp_path}", f"algo.demonstrations={demos}", "total_env_steps=4096", "algo.compile=false"]
    run = msrl.train(str(REPO / "configs/gail_cartpole.yaml"), [*overrides, "progress=false", "eval_episodes=2"])
    assert [r["env_steps"] for r in run.metrics] == [2048, 4096]  # the demonstrations' samples are not steps
    assert all(0.0 < r["d_expert"] < 1.0 and np.isfinite(r["discriminator_loss"]) for r in run.metrics)
    mismatched = in_process(
        "train",
        str(REPO / "configs/gail_cartpole.yaml"),
        "--set",
        f"runs_dir={tmp_path}",
        "--set",
        f"algo.demonstrations={demos}",
        "--set",
        "algo.env_id=Acrobot-v1",
    )
    assert_one_error_line(mismatched, ["holds Box(4,) observations", "Acrobot-v1 has Box(6,)"])


def test_epsilon_one_records_uniform_actions(pendulum_data: Path) -> None:
    actions = np.concatenate([e.actions for e in read_episodes(pendulum_data)])
    assert actions.shape == (8 * 200, 1)
    assert actions.min() >= -2.0 and actions.max() <= 2.0
    assert abs(actions.mean()) < 0.15 and actions.std() == pytest.approx(4 / np.sqrt(12), rel=0.1)


def test_noise_moves_box_actions_within_their_bounds(ddpg: msrl.Run, tmp_path: Path) -> None:
    actions = {}
    for noise in ("0", "0.5"):
        out = tmp_path / f"noise{noise}"
        result = in_process("record", ddpg.checkpoint, "--episodes", "2", "--out", str(out), "--noise", noise)
        assert result.returncode == 0, explain(result)
        actions[noise] = np.concatenate([e.actions for e in read_episodes(out)])
    assert np.abs(actions["0.5"]).max() <= 2.0
    assert np.abs(actions["0.5"] - actions["0"]).mean() > 0.1  # the same greedy policy, noised
    assert np.unique(actions["0.5"]).size > 100  # drawn per step, not one offset


def test_iql_trains_from_the_dataset_and_is_evaluated_on_its_environment(pendulum_data: Path, tmp_path: Path) -> None:
    overrides = [f"runs_dir={tmp_path / 'a'}", f"algo.dataset={pendulum_data}", *IQL]
    run = msrl.train(str(REPO / "configs/iql_pendulum.yaml"), overrides)
    records = run.metrics
    assert [r["env_steps"] for r in records] == [320 * (i + 1) for i in range(16)]  # 5 batches of 64 an iteration
    assert all(np.isfinite(r["q_loss"]) and np.isfinite(r["value_loss"]) for r in records)
    assert run.evaluation is not None and run.evaluation.episodes == 3
    assert all(-2000 < value < 0 for value in run.evaluation.returns)  # Pendulum's returns
    again = msrl.train(str(REPO / "configs/iql_pendulum.yaml"), [f"runs_dir={tmp_path / 'b'}", *overrides[1:]])
    for ours, theirs in zip(records, again.metrics):
        assert (ours["q_loss"], ours["policy_loss"]) == (theirs["q_loss"], theirs["policy_loss"])
    assert run.evaluation.returns == again.evaluation.returns


@pytest.mark.landing  # starts Ray for multi_learner's two workers: 40 s on 2 cores
def test_two_learners_sharding_the_dataset_step_as_one_learner_with_their_batch(
    pendulum_data: Path, tmp_path: Path
) -> None:
    """``multi_learner``'s two learners each hold half the dataset's strata and sample half the
    batch; with their gradients averaged they take the steps one learner takes with the whole
    batch: the same weights, to float tolerance (the sums are ordered differently)."""
    import torch

    common = [f"algo.dataset={pendulum_data}", *IQL, "total_env_steps=2560", "algo.compile=false", "eval_episodes=0"]
    policies = {"local": ["policy=local"], "multi_learner": ["policy=multi_learner", "policy.learners=2"]}
    weights = {}
    for name, policy in policies.items():
        run = msrl.train(str(REPO / "configs/iql_pendulum.yaml"), [f"runs_dir={tmp_path / name}", *common, *policy])
        loaded = msrl.load(run.checkpoint)
        assert loaded.learner.gradient_steps_taken == 40  # 8 iterations of 5
        weights[name] = loaded.learner.policy.state_dict()
    for key, value in weights["local"].items():
        torch.testing.assert_close(weights["multi_learner"][key], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["awac", "cql"])
def test_awac_and_cql_train_from_the_dataset_too(pendulum_data: Path, tmp_path: Path, algorithm: str) -> None:
    overrides = [f"runs_dir={tmp_path}", f"algo.dataset={pendulum_data}", *IQL, "total_env_steps=640"]
    run = msrl.train(str(REPO / f"configs/{algorithm}_pendulum.yaml"), [*overrides, "algo.compile=false"])
    assert [r["env_steps"] for r in run.metrics] == [320, 640]
    assert all(np.isfinite(r["q_loss"]) and np.isfinite(r["policy_loss"]) for r in run.metrics)
    assert run.evaluation is not None and all(-2000 < value < 0 for value in run.evaluation.returns)


def test_a_resumed_run_reads_the_dataset_it_trained_on(pendulum_data: Path, tmp_path: Path) -> None:
    overrides = [f"runs_dir={tmp_path}", f"algo.dataset={pendulum_data}", *IQL, "total_env_steps=1280"]
    run = msrl.train(str(REPO / "configs/iql_pendulum.yaml"), overrides)
    other = tmp_path / "other"
    in_process("record", run.checkpoint, "--episodes", "8", "--out", str(other), "--epsilon", "1")
    assert read_info(other).env_id == "Pendulum-v1"  # an offline checkpoint records too
    before = (Path(run.run_dir) / "metrics.jsonl").read_bytes()
    longer = ["--set", "total_env_steps=2560"]
    result = in_process("train", "--resume", run.checkpoint, *longer, "--set", f"algo.dataset={other}")
    assert_one_error_line(result, ["checkpoint", "trained on dataset"])
    assert (Path(run.run_dir) / "metrics.jsonl").read_bytes() == before
    result = in_process("train", "--resume", run.checkpoint, *longer)  # on its own dataset it goes on
    assert result.returncode == 0, explain(result)
    assert "2,560 env steps" in result.stdout and "resumed at iteration 4" in result.stdout


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("missing", ["no dataset at", "no such folder"]),
        ("truncated", ["main_data.hdf5 cannot be read"]),
        ("altered_space", ["holds Box(4,) observations", "Pendulum-v1 has Box(3,)"]),
    ],
)
def test_a_bad_dataset_is_one_line_and_left_as_it_was(
    pendulum_data: Path, tmp_path: Path, change: str, words: list[str]
) -> None:
    import shutil

    data = tmp_path / "copy"
    shutil.copytree(pendulum_data, data)
    main = data / "data" / "main_data.hdf5"
    if change == "missing":
        data = tmp_path / "absent"
    elif change == "truncated":
        main.write_bytes(main.read_bytes()[:4096])
    else:
        meta = json.loads((data / "data" / "metadata.json").read_text())
        meta["observation_space"] = json.dumps(
            {"type": "Box", "dtype": "float32", "shape": [4], "low": [-1.0] * 4, "high": [1.0] * 4}
        )
        (data / "data" / "metadata.json").write_text(json.dumps(meta))
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file()} if data.exists() else {}
    config = str(REPO / "configs/iql_pendulum.yaml")
    result = in_process("train", config, "--set", f"algo.dataset={data}", "--set", f"runs_dir={tmp_path}")
    assert_one_error_line(result, words)
    assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--episodes", "0"], ["--episodes must be a positive integer"]),
        (["--episodes", "2", "--epsilon", "1.5"], ["--epsilon must be in [0, 1]"]),
        (["--episodes", "2", "--noise", "-1"], ["--noise must be"]),
    ],
)
def test_bad_record_options_are_one_line(cartpole: msrl.Run, tmp_path: Path, args: list[str], words: list[str]) -> None:
    result = in_process("record", cartpole.checkpoint, "--out", str(tmp_path / "ds"), *args)
    assert_one_error_line(result, words)
    assert not (tmp_path / "ds").exists()


def test_merge_joins_two_recordings_and_refuses_another_environments(
    cartpole: msrl.Run, ddpg: msrl.Run, pendulum_data: Path, tmp_path: Path
) -> None:
    noisy = tmp_path / "pendulum-noisy"
    result = in_process("record", ddpg.checkpoint, "--episodes", "3", "--out", str(noisy), "--noise", "0.3")
    assert result.returncode == 0, explain(result)
    mixed = tmp_path / "pendulum-mixed"
    result = in_process("merge", str(pendulum_data), str(noisy), "--out", str(mixed))
    assert result.returncode == 0, explain(result)
    assert "merged 2 datasets, 11 episodes (2,200 steps)" in result.stdout
    episodes = read_episodes(mixed)
    np.testing.assert_array_equal(episodes[8].actions, read_episodes(noisy)[0].actions)
    run = msrl.train(
        str(REPO / "configs/iql_pendulum.yaml"),
        [f"runs_dir={tmp_path / 'runs'}", f"algo.dataset={mixed}", *IQL, "total_env_steps=640", "eval_episodes=0"],
    )
    assert run.metrics[-1]["env_steps"] == 640
    cartpole_data = tmp_path / "cartpole"
    assert in_process("record", cartpole.checkpoint, "--episodes", "2", "--out", str(cartpole_data)).returncode == 0
    result = in_process("merge", str(pendulum_data), str(cartpole_data), "--out", str(tmp_path / "bad"))
    assert_one_error_line(result, ["differ in their environment", "nothing was written"])
    assert not (tmp_path / "bad").exists()


def test_record_never_writes_over_a_dataset(cartpole: msrl.Run, pendulum_data: Path) -> None:
    before = (pendulum_data / "data" / "main_data.hdf5").read_bytes()
    result = in_process("record", cartpole.checkpoint, "--episodes", "2", "--out", str(pendulum_data))
    assert_one_error_line(result, ["exists", "nothing was written"])
    assert (pendulum_data / "data" / "main_data.hdf5").read_bytes() == before
