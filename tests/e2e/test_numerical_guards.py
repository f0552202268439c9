"""Non-finite values stop a run where they enter: an environment whose observations go
NaN (from ``observe``, not only ``step``), and a learner whose reported loss goes NaN while its
weights stay finite.  Each is one line naming the origin (component, method, fragment, replica and
the run's iteration); the last good checkpoint stays as it was."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import msrl
import msrl.envs
from msrl import Box, Discrete, DivergenceError, EnvError
from msrl.app import Trainer
from msrl.envs import BatchedEnv, Physics
from msrl.rl import OBS_STATS

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the guide's example algorithm, which the runs below change one part of
from examples.reinforce import Reinforce, ReinforceLearner  # noqa: E402

COMMON = ["progress=false", "eval_episodes=0", "algo.num_envs=4", "algo.num_steps=16", "checkpoint_every=1"]


class GoesNaNPhysics(Physics):
    """A walker whose observation is NaN from its fourth step on (rewards stay finite)."""

    def draw_reset(self, n: int) -> np.ndarray:
        return np.zeros((n, 1))

    def write_obs(self, state: np.ndarray, out: np.ndarray) -> None:
        out[...] = np.where(state > 3.0, np.nan, state)

    def step(self, state, action, reward, terminated):
        terminated[...] = False
        reward[...] = np.asarray(action, np.float64)  # finite, and something to learn
        return state + 1.0


class GoesNaN(BatchedEnv):
    env_id = "GoesNaN-v0"
    max_episode_steps = 1000
    state_dim = 1
    observation_space = Box(low=-1e6, high=1e6, shape=(1,))
    action_space = Discrete(2)
    physics = {"numpy": GoesNaNPhysics}


class NaNObservePhysics(GoesNaNPhysics):
    def write_obs(self, state: np.ndarray, out: np.ndarray) -> None:
        out[...] = np.nan


class NaNFromTheStart(GoesNaN):
    env_id = "NaNFromTheStart-v0"
    physics = {"numpy": NaNObservePhysics}


@pytest.fixture(autouse=True)
def registered():
    msrl.envs.register("GoesNaN-v0", "numpy", GoesNaN)
    msrl.envs.register("NaNFromTheStart-v0", "numpy", NaNFromTheStart)


def test_nan_observations_from_observe_stop_the_run_at_their_origin(tmp_path: Path) -> None:
    with pytest.raises(EnvError) as caught:
        msrl.train(
            str(REPO / "configs" / "ppo_cartpole.yaml"),
            [f"runs_dir={tmp_path}", *COMMON, "algo.env_id=NaNFromTheStart-v0"],
        )
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("iteration 1: while executing node env.observe of fragment local, replica 0")
    assert "environment 'env' returned a non-finite obs (NaN or inf) from observe()" in message


def test_nan_observations_from_step_stop_the_run_and_keep_the_checkpoint(tmp_path: Path) -> None:
    with Trainer(
        str(REPO / "configs" / "ppo_cartpole.yaml"),
        [f"runs_dir={tmp_path}", *COMMON, "algo.num_steps=2", "algo.num_minibatches=2", "algo.env_id=GoesNaN-v0"],
    ) as trainer:
        trainer.step()  # steps 1-2: finite
        saved = (Path(trainer.run_dir) / "checkpoint.pt").read_bytes()
        with pytest.raises(EnvError, match=r"^iteration 2: .*env\.step.*non-finite obs \(NaN or inf\) from step\(\)"):
            trainer.step()
        assert (Path(trainer.run_dir) / "checkpoint.pt").read_bytes() == saved


class NaNLossLearnerMixin:
    """Reports a NaN loss from its third update on; its weights stay what the update left."""

    updates = 0

    def learn(self, batch):
        metrics = super().learn(batch)
        self.updates += 1
        return {**metrics, "policy_loss": math.nan} if self.updates >= 3 else metrics


def test_a_nan_loss_stops_the_run_before_its_record_and_checkpoint(tmp_path: Path) -> None:
    with Trainer(
        str(REPO / "examples" / "reinforce_cartpole.yaml"),
        [f"runs_dir={tmp_path}", *COMMON, f"algorithm={__name__}:NaNLossReinforce"],
    ) as trainer:
        trainer.step()
        trainer.step()
        run_dir = Path(trainer.run_dir)
        saved = (run_dir / "checkpoint.pt").read_bytes()
        with pytest.raises(DivergenceError) as caught:
            trainer.step()
    assert str(caught.value).startswith("iteration 3: the learner's update reported policy_loss = nan")
    assert (run_dir / "checkpoint.pt").read_bytes() == saved
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2  # no record of the bad update


def _reinforce_with(learner_class: type) -> type:
    """REINFORCE whose learner is a ``learner_class`` (a ``ReinforceLearner`` subclass), built as
    the usual one is."""

    class Changed(Reinforce):
        def __init__(self, config, run):
            super().__init__(config, run)
            learner = learner_class.__new__(learner_class)
            learner.__dict__.update(self.learner.__dict__)
            self.learner = learner

    return Changed


NaNLossReinforce = _reinforce_with(type("NaNLossLearner", (NaNLossLearnerMixin, ReinforceLearner), {}))


def _probe_algorithm(probe: torch.Tensor) -> type:
    """REINFORCE whose learner sends ``probe`` beside its weights, as an entry the actor skips (no
    observation statistics to load): the weight check sees it, the acting does not."""

    class ProbeLearner(ReinforceLearner):
        def get_weights(self):
            return {**super().get_weights(), f"{OBS_STATS}.probe": probe.clone()}

    return _reinforce_with(ProbeLearner)


HUGE = torch.full((4096,), 3e38)  # every value finite; their float32 sum is inf
OneInf = _probe_algorithm(torch.cat([torch.zeros(100), torch.tensor([math.inf])]))
InfMinusInf = _probe_algorithm(torch.tensor([1.0, math.inf, -math.inf]))  # a NaN sum, no NaN value
HugeButFinite = _probe_algorithm(HUGE)


def _reinforce(tmp_path: Path, algorithm: str) -> msrl.Run:
    overrides = [f"runs_dir={tmp_path}", *COMMON, f"algorithm={__name__}:{algorithm}", "total_env_steps=128"]
    return msrl.train(str(REPO / "examples" / "reinforce_cartpole.yaml"), overrides)


@pytest.mark.parametrize("algorithm", ["OneInf", "InfMinusInf"])
def test_a_non_finite_weight_among_many_stops_the_run(tmp_path: Path, algorithm: str) -> None:
    with pytest.raises(DivergenceError, match="learner 'learner' has non-finite weights"):
        _reinforce(tmp_path, algorithm)


def test_finite_weights_whose_sum_overflows_do_not_stop_the_run(tmp_path: Path) -> None:
    assert not math.isfinite(float(HUGE.sum()))
    assert _reinforce(tmp_path, "HugeButFinite").iterations == 2


def test_ppo_minibatches_of_one_sample_train_with_finite_weights(tmp_path: Path) -> None:
    """Normalising one advantage divided by a NaN std: every weight went NaN in the first update."""
    run = msrl.train(
        str(REPO / "configs" / "ppo_cartpole.yaml"),
        [f"runs_dir={tmp_path}", *COMMON, "algo.num_steps=2", "algo.num_minibatches=8", "total_env_steps=32"],
    )
    assert run.iterations == 4 and all(math.isfinite(r["policy_loss"]) for r in run.metrics)
