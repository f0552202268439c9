"""DQN's options beside prioritized replay (tests/unit/test_prioritized_replay.py): the dueling
head's combination of value and advantages, built on the MLP and on a convolutional torso, the
weighted loss that a uniform replay's weights of one leave as the plain mean, and C51's
distributional head and target projection."""

from __future__ import annotations

import pytest
import torch

from algorithms.dqn import DQNConfig, DQNLearner, q_network
from msrl.core import Box, ConfigError, RunInfo
from msrl.rl import CategoricalQ, DuelingQ, ReplayBatch, categorical_projection


def _batch(steps: int) -> ReplayBatch:
    """Six transitions of 4-value observations and two actions for each of ``steps`` gradient steps."""
    g = torch.Generator().manual_seed(5)
    return ReplayBatch(
        torch.randn(6, steps, 4, generator=g),
        torch.randint(2, (6, steps), generator=g),
        torch.randn(6, steps, generator=g),
        torch.randn(6, steps, 4, generator=g),
        torch.zeros(6, steps),
    )


def test_the_dueling_head_is_the_value_plus_each_advantage_less_their_mean() -> None:
    net = q_network(4, 3, DQNConfig(hidden_sizes=(16, 16), dueling=True), seed=0)
    assert isinstance(net, DuelingQ)
    obs = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        features = net.body(obs)
        value, advantage = net.value(features), net.advantage(features)
        torch.testing.assert_close(net(obs), value + advantage - advantage.mean(-1, keepdim=True))
    # the Q-values' mean over actions is the value: the advantages' mean is taken out
    torch.testing.assert_close(net(obs).mean(-1), value.squeeze(-1))


def test_a_dueling_head_goes_on_a_convolutional_torso_too() -> None:
    frames = Box(0, 255, (4, 84, 84), dtype="uint8")
    net = q_network(0, 6, DQNConfig(network="nature_cnn", dueling=True), seed=0, obs_space=frames)
    assert isinstance(net, DuelingQ)
    assert net(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 6)


def test_dueling_without_a_hidden_layer_is_one_line() -> None:
    with pytest.raises(ConfigError, match="algo.dueling needs a hidden layer"):
        DQNConfig(hidden_sizes=(), dueling=True).validate()


def test_a_uniform_replays_loss_is_the_plain_mean_and_its_td_errors_come_back_per_transition() -> None:
    config = DQNConfig(hidden_sizes=(8,), compile=False, loss="mse", max_grad_norm=0.0)
    learner = DQNLearner(4, 2, config, RunInfo(seed=2, total_env_steps=100))
    batch = _batch(steps=2)
    obs, actions, rewards, next_obs, terminated = (field[:, 0] for field in batch)
    with torch.no_grad():
        target = rewards + config.gamma * learner.q(next_obs).max(-1).values  # the target is a copy, as yet
        q = learner.q(obs).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    metrics = learner.learn(batch)
    errors = learner.td_errors()
    assert errors.shape == (6, 2)
    torch.testing.assert_close(errors[:, 0], target - q)
    assert metrics["td_loss"] == pytest.approx(
        (((target - q) ** 2).mean().item() + (errors[:, 1] ** 2).mean().item()) / 2, rel=1e-5
    )


def test_the_projection_splits_each_moved_atom_between_its_two_neighbours() -> None:
    support = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])
    probs = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0], [0.1, 0.2, 0.4, 0.2, 0.1], [0.0, 0.0, 0.0, 0.5, 0.5]])
    rewards = torch.tensor([0.25, 1.0, 0.0])
    discounts = torch.tensor([0.5, 1.0, 0.0])  # the third: terminated, all mass to its reward
    target = categorical_projection(probs, rewards, discounts, support)
    # 0 moves to 0.25: a quarter of the way from atom 0 to atom 1
    torch.testing.assert_close(target[0], torch.tensor([0.0, 0.0, 0.75, 0.25, 0.0]))
    # every atom moves up one; the top one and the one moved to it are clipped to 2
    torch.testing.assert_close(target[1], torch.tensor([0.0, 0.1, 0.2, 0.4, 0.3]))
    torch.testing.assert_close(target[2], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(target.sum(-1), torch.ones(3))


def test_a_distributional_network_acts_on_its_expected_return_and_learns_by_cross_entropy() -> None:
    config = DQNConfig(hidden_sizes=(8,), compile=False, distributional=True, atoms=11, v_min=-5, v_max=5)
    net = q_network(4, 2, config, seed=0)
    assert isinstance(net, CategoricalQ)
    obs = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(net(obs), (net.logits(obs).softmax(-1) * torch.linspace(-5, 5, 11)).sum(-1))
    dueling = q_network(4, 2, DQNConfig(hidden_sizes=(8,), distributional=True, atoms=11, dueling=True), seed=0)
    assert isinstance(dueling, CategoricalQ) and isinstance(dueling.net, DuelingQ)
    assert dueling.logits(obs).shape == (3, 2, 11)
    learner = DQNLearner(4, 2, config, RunInfo(seed=2, total_env_steps=100))
    batch = _batch(steps=3)
    losses = [learner.learn(batch)["td_loss"] for _ in range(30)]
    assert (learner.td_errors() >= 0).all()  # cross-entropies, the priorities of a prioritized replay
    assert losses[-1] < losses[0]  # it fits the fixed batch's (moving) targets


def test_a_distribution_needs_two_atoms_and_an_ordered_support() -> None:
    with pytest.raises(ConfigError, match="algo.distributional needs algo.atoms >= 2"):
        DQNConfig(distributional=True, v_min=1.0, v_max=1.0).validate()
