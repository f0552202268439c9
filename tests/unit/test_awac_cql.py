"""``awac`` and ``cql`` (``algorithms/awac.py``, ``algorithms/cql.py``): one update of each checked
against its steps written out with plain torch and the same random draws (AWAC: critics on the
policy's next action, then the advantage-weighted policy regression; CQL: SAC's critics with the
conservative soft maximum over random and policy actions, then SAC's policy and temperature), the
conservative term pushing values of actions outside the data below those in it, and bad settings
in one line."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from algorithms.awac import AWACConfig, AWACLearner
from algorithms.cql import CQLConfig, CQLLearner
from msrl.core import Box, ConfigError, RunInfo
from msrl.rl import ReplayBatch

SPACE = Box(-2.0, 2.0, (2,))
RUN = RunInfo(seed=5, total_env_steps=1000)


def _batch(rows: int = 12, batches: int = 2) -> ReplayBatch:
    g = torch.Generator().manual_seed(2)
    obs, next_obs = torch.randn(rows, batches, 3, generator=g), torch.randn(rows, batches, 3, generator=g)
    actions = torch.rand(rows, batches, 2, generator=g) * 4 - 2
    rewards = torch.randn(rows, batches, generator=g)
    terminated = (torch.rand(rows, batches, generator=g) < 0.2).float()
    return ReplayBatch(obs, actions, rewards, next_obs, terminated)


def _polyak(target: torch.nn.Module, source: torch.nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.mul_(1 - tau).add_(tau * s)


def _assert_same(pairs: list[tuple[torch.nn.Module, torch.nn.Module]]) -> None:
    for ours, theirs in pairs:
        for a, b in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(a, b)


def test_one_awac_update_is_its_two_steps_in_order() -> None:
    config = AWACConfig(dataset="unused", compile=False, hidden_sizes=(16, 16), awac_lambda=0.5)
    learner = AWACLearner(3, SPACE, config, RUN)
    policy, critic = copy.deepcopy(learner.policy), copy.deepcopy(learner.critic)
    target = copy.deepcopy(learner.critic_target)
    g = torch.Generator().set_state(learner.generator.get_state())
    opt_c = torch.optim.Adam(critic.parameters(), lr=config.learning_rate)
    opt_p = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    batch = _batch()
    low, high = policy.bias - policy.scale, policy.bias + policy.scale

    def draw(o: torch.Tensor) -> torch.Tensor:
        """An action of the policy's Gaussian, clipped to the bounds."""
        return (policy(o) + torch.randn(o.shape[0], 2, generator=g) * policy.log_std.exp()).clamp(low, high)

    for k in range(2):
        obs, actions, rewards, next_obs, terminated = batch.minibatch(k)
        opt_c.zero_grad()
        y = (rewards + config.gamma * (1 - terminated) * torch.min(*target(next_obs, draw(next_obs)))).detach()
        q1, q2 = critic(obs, actions)
        (((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean()).backward()
        opt_c.step()
        opt_p.zero_grad()
        with torch.no_grad():
            advantage = torch.min(*critic(obs, actions)) - torch.min(*critic(obs, draw(obs)))
            weight = torch.exp(advantage / config.awac_lambda).clamp(max=config.max_weight)
        logp = torch.distributions.Normal(policy(obs), policy.log_std.exp()).log_prob(actions).sum(-1)
        (-(weight * logp).mean()).backward()
        opt_p.step()
        _polyak(target, critic, config.tau)
    metrics = learner.learn(batch)
    _assert_same([(learner.critic, critic), (learner.policy, policy), (learner.critic_target, target)])
    assert set(metrics) == {"q_loss", "policy_loss", "mean_weight"}


def test_one_cql_update_is_sacs_steps_with_the_conservative_term() -> None:
    config = CQLConfig(dataset="unused", compile=False, hidden_sizes=(16, 16), cql_n_actions=3, cql_alpha=5.0)
    learner = CQLLearner(3, SPACE, config, RUN)
    policy, critic = copy.deepcopy(learner.policy), copy.deepcopy(learner.critic)
    target, temperature = copy.deepcopy(learner.critic_target), copy.deepcopy(learner.temperature)
    g = torch.Generator().set_state(learner.generator.get_state())
    opt_c = torch.optim.Adam(critic.parameters(), lr=config.q_lr)
    opt_p = torch.optim.Adam(policy.parameters(), lr=config.policy_lr)
    opt_a = torch.optim.Adam([temperature.log_alpha], lr=config.policy_lr)
    batch, n = _batch(), config.cql_n_actions
    for k in range(2):
        obs, actions, rewards, next_obs, terminated = batch.minibatch(k)
        rows = obs.shape[0]
        alpha = temperature.log_alpha.detach().exp()
        next_noise, here_noise = torch.randn(rows, 2, generator=g), torch.randn(rows * n, 2, generator=g)
        there_noise, uniform = torch.randn(rows * n, 2, generator=g), torch.rand(rows * n, 2, generator=g) * 2 - 1
        policy_noise = torch.randn(rows, 2, generator=g)
        opt_c.zero_grad()
        with torch.no_grad():
            next_actions, _ = policy.sample(next_obs, None, next_noise)
            y = rewards + config.gamma * (1 - terminated) * torch.min(*target(next_obs, next_actions))
            states = obs.repeat_interleave(n, 0)
            here, here_logp = policy.sample(states, None, here_noise)
            there, there_logp = policy.sample(next_obs.repeat_interleave(n, 0), None, there_noise)
            random = uniform * policy.scale + policy.bias
        q = critic(obs, actions)
        loss = sum(((qi - y) ** 2).mean() for qi in q)
        for i in range(2):
            scores = torch.cat(
                [
                    critic(states, random)[i].reshape(rows, n) - 2 * math.log(0.5),
                    critic(states, there)[i].reshape(rows, n) - there_logp.reshape(rows, n),
                    critic(states, here)[i].reshape(rows, n) - here_logp.reshape(rows, n),
                ],
                1,
            )
            loss = loss + config.cql_alpha * (torch.logsumexp(scores, 1) - q[i]).mean()
        loss.backward()
        opt_c.step()
        opt_p.zero_grad()
        sampled, logp = policy.sample(obs, None, policy_noise)
        (alpha * logp - torch.min(*critic(obs, sampled))).mean().backward()
        opt_p.step()
        opt_a.zero_grad()
        (-(temperature.log_alpha * (logp.detach().mean() + learner.target_entropy))).backward()
        opt_a.step()
        _polyak(target, critic, config.tau)
    metrics = learner.learn(batch)
    _assert_same([(learner.critic, critic), (learner.policy, policy), (learner.critic_target, target)])
    torch.testing.assert_close(learner.log_alpha, temperature.log_alpha)
    assert set(metrics) == {"q_loss", "cql_gap", "policy_loss", "alpha"}


def test_the_conservative_term_lowers_values_off_the_data() -> None:
    """One state, one action in the data: with the conservative term the critics value it above
    uniformly random actions after some steps; without it (cql_alpha 0) they need not."""
    gaps = {}
    for weight in (0.0, 5.0):
        config = CQLConfig(dataset="unused", compile=False, hidden_sizes=(32, 32), cql_alpha=weight, q_lr=3e-3)
        learner = CQLLearner(3, SPACE, config, RUN)
        obs = torch.zeros(64, 2, 3)
        actions = torch.full((64, 2, 2), 1.5)
        batch = ReplayBatch(obs, actions, torch.zeros(64, 2), obs, torch.ones(64, 2))
        for _ in range(40):
            learner.learn(batch)
        with torch.no_grad():
            data = torch.min(*learner.critic(obs[:1, 0], actions[:1, 0])).item()
            others = torch.rand(256, 2, generator=torch.Generator().manual_seed(0)) * 4 - 2
            off = torch.min(*learner.critic(torch.zeros(256, 3), others)).mean().item()
        gaps[weight] = data - off
    assert gaps[5.0] > 0.5 and gaps[5.0] > gaps[0.0] + 0.5


@pytest.mark.parametrize(
    ("make", "field", "value", "message"),
    [
        (AWACConfig, "awac_lambda", 0.0, "algo.awac_lambda must be > 0"),
        (CQLConfig, "cql_n_actions", 0, "algo.cql_n_actions must be >= 1"),
        (CQLConfig, "cql_alpha", -1.0, "algo.cql_alpha must be >= 0"),
        (CQLConfig, "dataset", "", "algo.dataset is required"),
    ],
)
def test_bad_settings_are_one_line(make: type, field: str, value: object, message: str) -> None:
    config = make(dataset="somewhere")
    setattr(config, field, value)
    with pytest.raises(ConfigError, match=message):
        config.validate()
