"""SAC's two log-std heads (``algo.log_std_head``): CleanRL's tanh squash into [-5, 2] and SB3's
clamp to [-20, 2], where each starts and where each stops, and an unknown head named in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from algorithms.sac import SAC, SACConfig, SACLearner
from msrl.app import load_config
from msrl.core import Box, ConfigError, RunInfo


def _learner(head: str) -> SACLearner:
    config = SACConfig(batch_size=8, hidden_sizes=(32, 32), log_std_head=head)
    return SACLearner(3, Box(-2.0, 2.0, (2,)), config, RunInfo(seed=4, total_env_steps=1000))


def _log_std(learner: SACLearner, obs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return learner.policy(obs)[1]


def test_the_tanh_head_starts_near_a_std_of_0_22_and_the_clamp_head_near_1() -> None:
    obs = torch.randn(256, 3, generator=torch.Generator().manual_seed(0))
    tanh, clamp = _log_std(_learner("tanh"), obs), _log_std(_learner("clamp"), obs)
    # the same weights (one seed) under both heads: tanh maps the layer's small outputs x to
    # -5 + 3.5 (tanh(x) + 1), about -1.5; the clamp passes them through, about 0
    torch.testing.assert_close(tanh, -5.0 + 3.5 * (torch.tanh(clamp) + 1.0))
    assert tanh.mean().item() == pytest.approx(-1.5, abs=0.3)
    assert clamp.mean().item() == pytest.approx(0.0, abs=0.3)


@pytest.mark.parametrize("head, low, high", [("tanh", -5.0, 2.0), ("clamp", -20.0, 2.0)])
def test_each_head_stops_at_its_bounds(head: str, low: float, high: float) -> None:
    learner, obs = _learner(head), torch.randn(16, 3, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        learner.policy.log_std[-1].bias.fill_(1e3)
    assert torch.all(_log_std(learner, obs) == high)
    with torch.no_grad():
        learner.policy.log_std[-1].bias.fill_(-1e3)
    assert torch.all(_log_std(learner, obs) == low)


def test_sac_trains_with_the_clamp_head_and_its_actor_acts_with_the_learners_head() -> None:
    config = SACConfig(num_envs=2, batch_size=16, learning_starts=8, hidden_sizes=(16, 16), log_std_head="clamp")
    algo = SAC(config, RunInfo(seed=0, total_env_steps=200))
    metrics = [algo.train_step() for _ in range(12)]
    assert all(torch.isfinite(torch.tensor(m["q_loss"])) for m in metrics[-4:])
    obs = torch.as_tensor(algo.env.observe(), dtype=torch.float32)
    with torch.no_grad():  # the synced weights through each copy's own head: the same log-stds
        torch.testing.assert_close(algo.actor.policy(obs)[1], algo.learner.policy(obs)[1])
    actions = algo.actor.act(obs)
    assert torch.all(actions.abs() <= 2.0)  # Pendulum's torque bounds, after the tanh and the rescaling


def test_an_unknown_log_std_head_is_one_line_naming_the_choices() -> None:
    config = Path(__file__).resolve().parents[2] / "configs" / "sac_pendulum.yaml"
    message = "unknown algo.log_std_head 'softplus'; valid choices: tanh, clamp"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(str(config), ["algo.log_std_head=softplus"])
