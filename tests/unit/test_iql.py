"""``iql`` (``algorithms/iql.py``): one update checked against IQL's three steps written out with plain
torch (the value's expectile regression on the target critics, the critics' TD regression on the
value, the advantage-weighted policy regression, then the Polyak step), the expectile leaning the
value above the critics' mean, the policy's step size following its cosine, the dataset's spaces
checked against the evaluation environment, and bad settings in one line."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

import msrl.envs
from algorithms.iql import IQL, IQLConfig, IQLLearner
from msrl.core import Box, ConfigError, DatasetError, Discrete, RunInfo
from msrl.data import Episode, observation_statistics, write_dataset
from msrl.rl import ReplayBatch

SPACE = Box(-2.0, 2.0, (1,))
RUN = RunInfo(seed=5, total_env_steps=1000)


def _batch(rows: int = 16, batches: int = 1) -> ReplayBatch:
    g = torch.Generator().manual_seed(2)
    obs, next_obs = torch.randn(rows, batches, 3, generator=g), torch.randn(rows, batches, 3, generator=g)
    actions = torch.rand(rows, batches, 1, generator=g) * 4 - 2
    rewards = torch.randn(rows, batches, generator=g)
    terminated = (torch.rand(rows, batches, generator=g) < 0.2).float()
    return ReplayBatch(obs, actions, rewards, next_obs, terminated)


def test_one_update_is_iqls_three_steps_in_order() -> None:
    config = IQLConfig(dataset="unused", compile=False, hidden_sizes=(16, 16), beta=2.0)
    learner = IQLLearner(3, SPACE, config, RUN)
    policy, critic = copy.deepcopy(learner.policy), copy.deepcopy(learner.critic)
    target, value = copy.deepcopy(learner.critic_target), copy.deepcopy(learner.value)
    opts = [torch.optim.Adam(m.parameters(), lr=config.learning_rate) for m in (value, critic, policy)]
    batch = _batch(batches=2)
    for k in range(2):  # the second step reads Adam's moments and the target from the first
        obs, actions, rewards, next_obs, terminated = batch.minibatch(k)
        for opt in opts:
            opt.zero_grad()
        diff = torch.min(*target(obs, actions)).detach() - value(obs).squeeze(-1)
        (torch.where(diff < 0, 1 - config.expectile, config.expectile) * diff**2).mean().backward()
        opts[0].step()
        y = (rewards + config.gamma * (1 - terminated) * value(next_obs).squeeze(-1)).detach()
        q1, q2 = critic(obs, actions)
        (((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean()).backward()
        opts[1].step()
        advantage = (torch.min(*target(obs, actions)) - value(obs).squeeze(-1)).detach()
        weight = torch.exp(config.beta * advantage).clamp(max=config.max_weight)
        std = policy.log_std.clamp(-20, 2).exp()
        logp = torch.distributions.Normal(policy(obs), std).log_prob(actions).sum(-1)
        (-(weight * logp).mean()).backward()
        opts[2].step()
        with torch.no_grad():
            for t, s in zip(target.parameters(), critic.parameters()):
                t.mul_(1 - config.tau).add_(config.tau * s)
    metrics = learner.learn(batch)
    for ours, theirs in ((learner.value, value), (learner.critic, critic), (learner.policy, policy)):
        for a, b in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(a, b)
    for a, b in zip(learner.critic_target.parameters(), target.parameters()):
        torch.testing.assert_close(a, b)
    assert set(metrics) == {"value_loss", "q_loss", "policy_loss", "mean_weight"}
    assert learner.gradient_steps_taken == 2


def test_the_expectile_leans_the_value_towards_the_better_actions() -> None:
    """Two actions at one state, valued 0 and 1 by fixed critics: the value's fit lies at the
    expectile of {0, 1}, 0.7 for expectile 0.7 (the mean would be 0.5)."""
    config = IQLConfig(dataset="unused", compile=False, hidden_sizes=(8,), learning_rate=1e-2)
    learner = IQLLearner(3, SPACE, config, RUN)
    obs = torch.zeros(64, 3)
    actions = torch.cat([torch.full((32, 1), -1.0), torch.full((32, 1), 1.0)])
    with torch.no_grad():  # critics that say Q(s, a) = (a + 1) / 2: 0 and 1
        for q in (learner.critic_target.q1, learner.critic_target.q2):
            for layer in q:
                if isinstance(layer, torch.nn.Linear):
                    layer.weight.zero_()
                    layer.bias.zero_()
            q[0].weight[0, 3] = 1.0
            q[0].bias[0] = 1.0
            q[-1].weight[0, 0] = 0.5
    for _ in range(600):
        learner.value_step(obs, actions)
    assert learner.value(obs[:1]).item() == pytest.approx(0.7, abs=0.03)


def _dataset(tmp_path: Path, obs_space: Box, action_space: Box | Discrete) -> Path:
    rng = np.random.default_rng(0)
    steps = 4
    action = rng.integers(0, 2, steps) if isinstance(action_space, Discrete) else rng.uniform(-2, 2, (steps, 1))
    episode = Episode(
        observations=rng.uniform(-1, 1, (steps + 1, *obs_space.shape)).astype(np.float32),
        actions=np.asarray(action, dtype=np.int64 if isinstance(action_space, Discrete) else np.float32),
        rewards=rng.normal(size=steps),
        terminations=np.array([0, 0, 0, 1], dtype=bool),
        truncations=np.zeros(steps, dtype=bool),
    )
    out = tmp_path / "ds"
    write_dataset(out, [episode], obs_space, action_space, "test/ds-v0", "Pendulum-v1")
    return out


def test_the_policys_step_size_decays_by_a_cosine_over_the_runs_gradient_steps() -> None:
    """Over a run of 4 gradient steps of 16 transitions, the policy's steps take 3e-4 times
    0.5 (1 + cos(pi t / 4)) at step t; the value's and the critics' keep theirs."""
    config = IQLConfig(dataset="unused", compile=False, hidden_sizes=(8, 8), batch_size=16, policy_lr_decay=True)
    learner = IQLLearner(3, SPACE, config, RunInfo(seed=5, total_env_steps=64))
    seen = []
    step = learner.policy_step.__call__

    def recording(*batch: object, **kw: object) -> object:
        seen.append(learner.policy_optimizer.param_groups[0]["lr"])
        return step(*batch, **kw)

    learner.policy_step = recording
    learner.learn(_batch(batches=4))
    assert seen == pytest.approx([3e-4 * 0.5 * (1 + np.cos(np.pi * t / 4)) for t in range(4)])
    assert learner.value_optimizer.param_groups[0]["lr"] == learner.critic_optimizer.param_groups[0]["lr"] == 3e-4


def test_a_dataset_of_other_spaces_than_the_environments_is_one_line(tmp_path: Path) -> None:
    out = _dataset(tmp_path, Box(-1.0, 1.0, (4,)), SPACE)
    with pytest.raises(DatasetError, match=r"holds Box\(4,\) observations .* Pendulum-v1 has Box\(3,\)"):
        IQL(IQLConfig(dataset=str(out)), RUN)


def test_normalize_obs_standardises_the_learners_batches_and_the_actors_observations(tmp_path: Path) -> None:
    """With ``normalize_obs`` the dataset's rows and the actor's inputs are standardised by the
    dataset's statistics alike, so the greedy action on a raw observation is the policy's mode on
    the standardised one; without, the actor passes observations through."""
    out = _dataset(tmp_path, msrl.envs.spec("Pendulum-v1").observation_space, SPACE)
    mean, std = observation_statistics(out)
    plain = IQL(IQLConfig(dataset=str(out), sample_strata=1), RUN)
    normalised = IQL(IQLConfig(dataset=str(out), sample_strata=1, normalize_obs=True), RUN)
    n = len(plain.dataset)
    torch.testing.assert_close(
        normalised.dataset.obs[:n], (plain.dataset.obs[:n] - torch.as_tensor(mean)) / torch.as_tensor(std)
    )
    raw = torch.tensor([[0.5, -0.2, 3.0]])
    with torch.no_grad():
        want = normalised.actor.policy.mode((raw - torch.as_tensor(mean)) / torch.as_tensor(std))
        torch.testing.assert_close(normalised.actor.greedy(raw), want)
        torch.testing.assert_close(plain.actor.greedy(raw), plain.actor.policy.mode(raw))
    assert not torch.allclose(normalised.actor.greedy(raw), normalised.actor.policy.mode(raw))


def test_discrete_actions_are_refused_by_name(tmp_path: Path) -> None:
    out = _dataset(tmp_path, Box(-1.0, 1.0, (4,)), Discrete(2))
    with pytest.raises(ConfigError, match="iql supports Box actions; CartPole-v1 has Discrete"):
        IQL(IQLConfig(dataset=str(out), env_id="CartPole-v1"), RUN)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dataset", "", "algo.dataset is required"),
        ("expectile", 1.0, "algo.expectile must be in"),
        ("beta", -1.0, "algo.beta must be >= 0"),
        ("batch_size", 0, "algo.batch_size must be >= 1"),
    ],
)
def test_bad_settings_are_one_line(field: str, value: object, message: str) -> None:
    config = IQLConfig(dataset="somewhere")
    setattr(config, field, value)
    with pytest.raises(ConfigError, match=message):
        config.validate()
