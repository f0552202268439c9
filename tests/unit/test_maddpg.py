"""``maddpg`` (``algorithms/maddpg.py``): the straight-through Gumbel-softmax is the one-hot of the
perturbed argmax going forward and softmax's gradient going back, each agent's critic input lets
only that agent's own action carry a gradient, one critic update equals the masked TD step written
out with plain torch (target policy's greedy next actions, target critic, Adam with the clip), and
the policy's update moves only the policy."""

from __future__ import annotations

import copy

import pytest
import torch

from algorithms.maddpg import MADDPGConfig, MADDPGLearner, gumbel_softmax, own_action_joint
from algorithms.qmix import AgentQ
from msrl.core import ConfigError, RunInfo
from msrl.rl import EpisodeBatch

RUN = RunInfo(seed=3, total_env_steps=1000)


def test_gumbel_softmax_is_one_hot_forward_and_softmax_backward() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 4, generator=g, requires_grad=True)
    noise = torch.randn(6, 4, generator=g)
    out = gumbel_softmax(logits, noise)
    torch.testing.assert_close(out, torch.nn.functional.one_hot((logits + noise).argmax(-1), 4).float())
    weights = torch.randn(6, 4, generator=g)
    (out * weights).sum().backward()
    soft = logits.detach().requires_grad_(True)
    (torch.softmax(soft + noise, -1) * weights).sum().backward()
    torch.testing.assert_close(logits.grad, soft.grad)


def test_only_an_agents_own_action_carries_its_critics_gradient() -> None:
    actions = torch.rand(2, 3, 4, requires_grad=True)  # (batch, agents, actions)
    joint = own_action_joint(actions)
    assert joint.shape == (2, 3, 12)
    for i in range(3):  # every row shows every agent's action
        torch.testing.assert_close(joint[:, i], actions.detach().flatten(1))
    joint[:, 1].sum().backward()
    assert actions.grad is not None
    assert (actions.grad[:, 1] == 1).all() and (actions.grad[:, [0, 2]] == 0).all()


def _episodes(batch: int = 4, length: int = 3, agents: int = 3) -> EpisodeBatch:
    g = torch.Generator().manual_seed(4)
    mask = torch.ones(batch, 1, length)
    mask[0, 0, -1] = 0.0
    terminated = torch.zeros(batch, 1, length)
    terminated[:, 0, -1] = 1.0
    return EpisodeBatch(
        torch.randn(batch, 1, length + 1, agents, 4, generator=g),
        torch.randint(5, (batch, 1, length, agents), generator=g),
        torch.randn(batch, 1, length, generator=g),
        terminated,
        mask,
    )


def test_one_critic_update_is_the_masked_td_step_on_the_target_policys_actions() -> None:
    config = MADDPGConfig(standardise_rewards=False, learning_rate=1e-2, max_grad_norm=0.5, hidden_size=8)
    net = AgentQ(4 + 3, 5, 8, True, torch.Generator().manual_seed(1))
    learner = MADDPGLearner(net, 3, 4, 5, config, RUN)
    critic, target = copy.deepcopy(learner.critic), copy.deepcopy(learner.target)
    policy_before = copy.deepcopy(learner.policy)
    batch = _episodes()
    obs, actions, rewards, terminated, mask = batch.minibatch(0)

    def values(net: torch.nn.Module, state: torch.Tensor, joint: torch.Tensor) -> torch.Tensor:
        rows = []
        for i in range(3):
            agent = torch.zeros(*state.shape[:-1], 3)
            agent[..., i] = 1.0
            rows.append(net(torch.cat((state, joint, agent), -1)).squeeze(-1))
        return torch.stack(rows, -1)

    with torch.no_grad():
        greedy = learner.logits(target["policy"], obs)[:, 1:].argmax(-1)
        next_joint = torch.nn.functional.one_hot(greedy, 5).float().flatten(2)
        y = rewards[..., None] + config.gamma * (1 - terminated[..., None]) * values(
            target["critic"], obs.flatten(2)[:, 1:], next_joint
        )
    taken = values(critic, obs.flatten(2)[:, :-1], torch.nn.functional.one_hot(actions, 5).float().flatten(2))
    weights = mask[..., None].expand_as(taken)
    loss = ((taken - y) ** 2 * weights).sum() / weights.sum()
    optimizer = torch.optim.Adam(critic.parameters(), lr=config.learning_rate)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(critic.parameters()), config.max_grad_norm)
    optimizer.step()
    metrics = learner.learn(batch)
    assert metrics["q_loss"] == pytest.approx(loss.item(), rel=1e-5)
    for ours, theirs in zip(learner.critic.parameters(), critic.parameters()):
        torch.testing.assert_close(ours, theirs)
    moved = [not torch.equal(a, b) for a, b in zip(learner.policy.parameters(), policy_before.parameters())]
    assert any(moved)  # the policy's step followed
    for ours, theirs in zip(learner.target.parameters(), target.parameters()):
        torch.testing.assert_close(ours, theirs)  # the targets wait for their interval


def test_bad_settings_are_one_line() -> None:
    with pytest.raises(ConfigError, match="algo.reg must be >= 0"):
        MADDPGConfig(reg=-1.0).validate()


def test_the_compiled_updates_equal_the_eager_ones() -> None:
    """Two learner calls, eagerly and with both steps as their regions' traced graphs (the arithmetic
    inductor builds): the same losses and the same critic and policy weights, to a thousandth of one
    Adam step (``learning_rate``: Adam moves a weight with a near-zero gradient by up to a whole step
    on rounding alone). The Gumbel-softmax's and the critic's one-hots are comparisons, which a
    compiled step holds."""
    config = MADDPGConfig(standardise_rewards=False, learning_rate=1e-2, max_grad_norm=0.5, hidden_size=8)
    runs = {}
    for compiled in (False, True):
        net = AgentQ(4 + 3, 5, 8, True, torch.Generator().manual_seed(1))
        learner = MADDPGLearner(net, 3, 4, 5, config, RUN)
        if compiled:
            for step in (learner.critic_step, learner.policy_step):
                for region in step.regions.values():
                    region.option, region.started, region.backend = "true", False, "traced"
        metrics = [learner.learn(_episodes()) for _ in range(2)]
        runs[compiled] = (learner, metrics)
    (eager, want), (learner, got) = runs[False], runs[True]
    assert learner.critic_step.regions["step"].ready and learner.policy_step.regions["step"].ready
    for ours, theirs in zip(got, want):
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6)
    for ours, theirs in zip(learner.critic.parameters(), eager.critic.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(learner.policy.parameters(), eager.policy.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-3 * config.learning_rate)
