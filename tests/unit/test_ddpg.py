"""DDPG and TD3 (``algorithms/ddpg.py``): one update of each checked against the papers' steps
written out here with plain torch (critics on the target networks' value of the smoothed target
action, then, every ``policy_frequency`` critic steps, the policy up the first critic and the
targets a Polyak step), the actor's warm-up and noisy actions, and bad settings in one line."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

from algorithms.ddpg import DDPGActor, DDPGConfig, DDPGLearner, TD3Config
from msrl.app import load_config, plan
from msrl.core import Box, ConfigError, RunInfo
from msrl.rl import ReplayBatch

REPO = Path(__file__).resolve().parents[2]
SPACE = Box(-2.0, 2.0, (2,))
RUN = RunInfo(seed=4, total_env_steps=1000)


def _batch(rows: int, batches: int) -> ReplayBatch:
    g = torch.Generator().manual_seed(9)
    return ReplayBatch(
        torch.randn(rows, batches, 3, generator=g),
        torch.rand(rows, batches, 2, generator=g) * 4 - 2,
        torch.randn(rows, batches, generator=g),
        torch.randn(rows, batches, 3, generator=g),
        (torch.rand(rows, batches, generator=g) < 0.3).float(),
    )


def _expected(learner: DDPGLearner, batch: ReplayBatch, config: DDPGConfig) -> tuple[dict, dict]:
    """The critics' and the policy's parameters after ``learn(batch)``, computed step by step."""
    policy, critic = copy.deepcopy(learner.policy), copy.deepcopy(learner.critic)
    policy_target, critic_target = copy.deepcopy(learner.policy_target), copy.deepcopy(learner.critic_target)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=config.q_lr)
    policy_opt = torch.optim.Adam(policy.parameters(), lr=config.policy_lr)
    draws = torch.Generator()
    draws.set_state(learner.generator.get_state())
    for k in range(batch.num_batches):
        obs, actions, rewards, next_obs, terminated = (field[:, k] for field in batch)
        noise = (torch.randn(actions.shape, generator=draws) * config.target_noise).clamp(
            -config.target_noise_clip, config.target_noise_clip
        )
        with torch.no_grad():
            next_actions = (policy_target(next_obs) + noise * 2.0).clamp(-2.0, 2.0)  # half the range is 2
            values = critic_target(next_obs, next_actions)
            smallest = torch.minimum(*values) if len(values) == 2 else values[0]
            target = rewards + config.gamma * (1 - terminated) * smallest
        critic_opt.zero_grad()
        sum(((q - target) ** 2).mean() for q in critic(obs, actions)).backward()
        critic_opt.step()
        if (k + 1) % config.policy_frequency == 0:
            policy_opt.zero_grad()
            (-critic(obs, policy(obs))[0].mean()).backward()
            policy_opt.step()
            with torch.no_grad():
                for target_net, net in ((policy_target, policy), (critic_target, critic)):
                    for t, p in zip(target_net.parameters(), net.parameters()):
                        t.mul_(1 - config.tau).add_(config.tau * p)
    return dict(critic.named_parameters()), dict(policy.named_parameters())


@pytest.mark.parametrize(
    "config",
    [
        TD3Config(hidden_sizes=(8,), compile=False, q_lr=1e-2, policy_lr=1e-2, tau=0.3),
        DDPGConfig(hidden_sizes=(8,), compile=False, q_lr=1e-2, policy_lr=1e-2, tau=0.3, policy_frequency=1),
    ],
    ids=["td3", "ddpg"],
)
def test_one_update_is_the_papers_steps(config: DDPGConfig) -> None:
    learner = DDPGLearner(3, SPACE, config, RUN)
    batch = _batch(rows=6, batches=4)
    critic, policy = _expected(learner, batch, config)
    before = {name: p.detach().clone() for name, p in learner.policy.named_parameters()}
    metrics = learner.learn(batch)
    for name, p in learner.critic.named_parameters():
        torch.testing.assert_close(p, critic[name], rtol=1e-4, atol=1e-5)
    for name, p in learner.policy.named_parameters():
        torch.testing.assert_close(p, policy[name], rtol=1e-4, atol=1e-5)
        assert not torch.equal(p, before[name])  # the policy did move
    assert learner.critic.count == (2 if config.twin_critics else 1)
    assert set(metrics) == {"q_loss", "policy_loss"} and all(torch.isfinite(torch.tensor(list(metrics.values()))))


def test_td3_delays_the_policy_and_the_targets() -> None:
    config = TD3Config(hidden_sizes=(8,), compile=False, policy_frequency=3)
    learner = DDPGLearner(3, SPACE, config, RUN)
    policy, target = copy.deepcopy(learner.policy), copy.deepcopy(learner.critic_target)
    learner.learn(_batch(rows=6, batches=2))  # two critic steps: not yet a third
    assert all(torch.equal(a, b) for a, b in zip(policy.parameters(), learner.policy.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(target.parameters(), learner.critic_target.parameters()))
    learner.learn(_batch(rows=6, batches=1))
    assert not all(torch.equal(a, b) for a, b in zip(policy.parameters(), learner.policy.parameters()))


def test_the_actor_acts_at_random_first_then_noisily_around_its_policy_within_the_bounds() -> None:
    config = DDPGConfig(hidden_sizes=(8,), compile=False, learning_starts=64, exploration_noise=0.05)
    actor = DDPGActor(3, SPACE, config, RUN)
    obs = torch.randn(64, 3, generator=torch.Generator().manual_seed(2))
    warm_up = actor.act(obs)
    assert warm_up.abs().max() <= 2.0 and warm_up.std() > 0.9  # uniform on [-2, 2]: std 1.15
    noisy = actor.act(obs)
    greedy = actor.greedy(obs)
    assert noisy.abs().max() <= 2.0
    inside = greedy.abs().max(dim=1).values < 1.5  # where the bounds cannot clip: 5 of the noise's 0.1 std
    assert inside.sum() >= 32
    spread = (noisy - greedy)[inside].std().item()
    assert spread == pytest.approx(0.1, rel=0.3)  # 0.05 of half the range, 2
    assert actor.env_steps == 128


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("algo.policy_frequency=0", "algo.policy_frequency must be >= 1, got 0"),
        ("algo.target_noise=-0.1", "algo.target_noise must be >= 0, got -0.1"),
        ("algo.tau=0", "algo.tau must be in (0, 1], got 0"),
        ("algo.env_id=CartPole-v1", "Box"),
    ],
)
def test_bad_settings_are_one_line(override: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        plan(load_config(str(REPO / "configs" / "td3_pendulum.yaml"), [override]))


def test_the_shipped_configs_are_the_references() -> None:
    td3 = load_config(str(REPO / "configs" / "td3_pendulum.yaml"))
    ddpg = load_config(str(REPO / "configs" / "ddpg_pendulum.yaml"))
    assert td3.algo.twin_critics and td3.algo.target_noise == 0.2 and td3.algo.policy_frequency == 2
    assert not ddpg.algo.twin_critics and ddpg.algo.target_noise == 0.0 and ddpg.algo.policy_frequency == 1
    for loaded in (td3, ddpg):
        assert list(loaded.algo.hidden_sizes) == [400, 300]
        assert loaded.algo.gamma == 0.98
