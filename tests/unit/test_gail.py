"""``gail`` (``algorithms/gail.py``): the discriminator's step is binary cross-entropy written out
with plain torch (the demonstrations' pairs labelled 1, the rollout's 0, one Adam step), the reward
paid to the policy is ``-log(1 - D(s, a))``, Discrete actions enter one-hot, and bad settings are
one line."""

from __future__ import annotations

import copy

import pytest
import torch

from algorithms.gail import Discriminator, DiscriminatorLearner, GAILConfig
from msrl.core import Box, ConfigError, Discrete, RunInfo
from msrl.rl import ReplayBatch, RolloutBatch

RUN = RunInfo(seed=3, total_env_steps=1000)


TWO = Discrete(2)


def _discriminator(space: Box | Discrete = TWO) -> Discriminator:
    return Discriminator(4, space, (16, 16), torch.Generator().manual_seed(0))


def test_one_discriminator_step_is_binary_cross_entropy() -> None:
    config = GAILConfig(demonstrations="unused", discriminator_lr=1e-2, discriminator_steps=2, compile=False)
    learner = DiscriminatorLearner(_discriminator(), config, RUN)
    theirs = copy.deepcopy(learner.discriminator)
    optimizer = torch.optim.Adam(theirs.parameters(), lr=config.discriminator_lr)
    g = torch.Generator().manual_seed(1)
    expert = ReplayBatch(
        torch.randn(8, 1, 4, generator=g), torch.randint(2, (8, 1), generator=g), *[torch.zeros(8, 1)] * 3
    )
    rollout = RolloutBatch(
        torch.randn(12, 4, generator=g), torch.randint(2, (12,), generator=g), *[torch.zeros(12)] * 4
    )
    for _ in range(2):
        optimizer.zero_grad()
        ours_expert = theirs.net(torch.cat([expert.obs[:, 0], torch.eye(2)[expert.actions[:, 0]]], -1)).squeeze(-1)
        ours_policy = theirs.net(torch.cat([rollout.obs, torch.eye(2)[rollout.actions]], -1)).squeeze(-1)
        loss = -torch.log(torch.sigmoid(ours_expert)).mean() - torch.log(1 - torch.sigmoid(ours_policy)).mean()
        loss.backward()
        optimizer.step()
    learner.learn(expert, rollout)
    for a, b in zip(learner.discriminator.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b)
    assert set(learner.metrics()) == {"discriminator_loss", "d_expert", "d_policy"}


def test_the_policys_reward_is_minus_log_one_minus_d() -> None:
    discriminator = _discriminator(Box(-1.0, 1.0, (2,)))
    obs, actions = torch.randn(5, 4), torch.rand(5, 2)
    d = torch.sigmoid(discriminator(obs, actions))
    torch.testing.assert_close(discriminator.reward(obs, actions), -torch.log(1 - d))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("demonstrations", "", "algo.demonstrations is required"),
        ("discriminator_steps", 0, "algo.discriminator_steps must be >= 1"),
        ("discriminator_lr", 0.0, "algo.discriminator_lr must be > 0"),
    ],
)
def test_bad_settings_are_one_line(field: str, value: object, message: str) -> None:
    config = GAILConfig(demonstrations="somewhere")
    setattr(config, field, value)
    with pytest.raises(ConfigError, match=message):
        config.validate()
