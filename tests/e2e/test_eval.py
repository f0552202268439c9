"""Greedy evaluation of a checkpoint (``msrl eval``, ``msrl.evaluate``) and a run's final
evaluation (``eval.json``) are one procedure: by default they agree on the same checkpoint, episode
for episode.  It builds only the actor (a learner's optimizer took seconds to set up) and runs with
torch's threads capped as the actor's fragment executor caps them, then puts them back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import CONFIG, REPO, explain, in_process

import msrl
from algorithms.ppo import PPOLearner
from msrl.rl import ActorCriticActor

SMALL = [
    "progress=false",
    "total_env_steps=512",
    "algo.num_envs=8",
    "algo.num_steps=32",
    "algo.num_minibatches=4",
    "algo.anneal_lr=false",
    "eval_episodes=5",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> msrl.Run:
    return msrl.train(str(REPO / CONFIG), [f"runs_dir={tmp_path_factory.mktemp('runs')}", *SMALL])


def test_eval_json_and_a_default_evaluation_of_the_checkpoint_agree(run: msrl.Run) -> None:
    written = json.loads((Path(run.run_dir) / "eval.json").read_text())
    assert run.evaluation is not None and written["returns"] == run.evaluation.returns
    again = msrl.evaluate(run.checkpoint)
    assert again.returns == written["returns"]  # same episodes, seeds and greedy actions
    assert len(set(again.returns)) > 1  # an untrained policy: episodes differ, so their seeds would show

    result = in_process("eval", run.checkpoint)
    assert result.returncode == 0, explain(result)
    assert result.stdout == f"{run.evaluation}\n"


def test_another_seed_is_another_evaluation(run: msrl.Run) -> None:
    assert msrl.evaluate(run.checkpoint, seed=12345).returns != msrl.evaluate(run.checkpoint).returns


def test_evaluation_builds_the_actor_alone_with_capped_threads(run: msrl.Run, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[int] = set()
    greedy = ActorCriticActor.greedy

    def counting(self, obs):
        threads.add(torch.get_num_threads())
        return greedy(self, obs)

    def no_learner(*args, **kwargs):
        raise AssertionError("evaluation built a learner")

    monkeypatch.setattr(ActorCriticActor, "greedy", counting)
    monkeypatch.setattr(PPOLearner, "__init__", no_learner)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        evaluation = msrl.evaluate(run.checkpoint, episodes=3)
        assert torch.get_num_threads() == 2  # put back
    finally:
        torch.set_num_threads(before)
    assert evaluation.episodes == 3
    assert threads == {1}  # the local policy's one fragment asks for 1 CPU
