"""Every algorithm learns with its learner and actors on a GPU (``policy.device=cuda``, the
``local`` policy's torch executor; IMPALA under its own ``async_single_learner`` with the learner
on the GPU): the shipped configs, cut to the learning tests' budgets by overrides.

What these check is the device path: weights, rollouts, replay, optimiser and value-normaliser
state on CUDA tensors, and actors acting on the learner's newest weights.  A broken path learns
nothing, so each bar is one that every seed measured clears and a random policy does not (CartPole
200, IMPALA 100 and DQN 50, beside random's 22 and a constant action's 9; Pendulum -500, random
about -1,200; simple_spread random + 4, as its CPU test, after twice that test's 60k steps).  The
config's quality against its reference is the CPU learning tests' to hold, at tighter bars for one
seed: on CUDA the sampling noise comes from CUDA's generator, so a run here is another seed's run.
Skipped where torch sees no GPU; ``tools/gpu/check.sh learning`` runs them on a GPU machine
(BENCHMARKS.md, "Every algorithm on the GPU", has what they gave on an H200)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_algorithm_learning import OVERRIDES
from test_multi_agent import CI_SPREAD, MARGIN_SPREAD, SPREAD, random_spread_return
from test_off_policy_learning import OVERRIDES as OFF_POLICY

import msrl

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (policy.device=cuda)")

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
COMMON = ["progress=false", "checkpoint_every=0"]
ON_GPU = ["policy.device=cuda"]

RUNS: dict[str, tuple[list[str], float]] = {
    # config -> (overrides, greedy-return bar); the budgets of test_algorithm_learning.py and
    # test_off_policy_learning.py, IMPALA at its shipped 200k (seeds 0-19 end at 139 or more on the CPU)
    "ppo_cartpole": (ON_GPU, 200.0),
    "a2c_cartpole": ([*OVERRIDES["a2c_cartpole"], *ON_GPU], 200.0),
    # DQN is still learning at 30k steps: seeds 1-6 ended at 79-322 on an H200 and 111-393 on the CPU
    "dqn_cartpole": ([*OFF_POLICY["dqn_cartpole"], *ON_GPU], 50.0),
    "impala_cartpole": (["policy.learner_gpus=1"], 100.0),
    "sac_pendulum": ([*OFF_POLICY["sac_pendulum"], *ON_GPU], -500.0),
}


def train(name: str, overrides: list[str], tmp_path: Path) -> msrl.Run:
    run = msrl.train(str(CONFIGS / f"{name}.yaml"), [f"runs_dir={tmp_path}", *COMMON, *overrides])
    print(f"{name} on the GPU {overrides}: greedy {run.evaluation.mean:.1f} over {run.evaluation.episodes}")
    return run


@pytest.mark.parametrize("name", sorted(RUNS))
def test_algorithm_learns_on_the_gpu(name: str, tmp_path: Path) -> None:
    overrides, bar = RUNS[name]
    run = train(name, overrides, tmp_path)
    assert run.evaluation.mean >= bar, f"{name} on the GPU: greedy return {run.evaluation.mean:.1f}, bar {bar}"


@pytest.mark.parametrize(
    "network",
    [[], ["algo.activation=relu", "algo.layer_norm=true"], ["algo.recurrent=true", "algo.layer_norm=true"]],
    ids=["tanh", "relu-ln", "recurrent-ln"],
)
def test_mappo_learns_on_the_gpu(network: list[str], tmp_path: Path) -> None:
    random_return = random_spread_return()
    run = msrl.train(SPREAD, [f"runs_dir={tmp_path}", *COMMON, "total_env_steps=120000", *CI_SPREAD, *ON_GPU, *network])
    print(f"mappo on the GPU {network}: greedy {run.evaluation.mean:.2f}, random {random_return:.2f}")
    assert run.evaluation.mean >= random_return + MARGIN_SPREAD, (run.evaluation.mean, random_return)
