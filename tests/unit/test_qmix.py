"""``qmix`` and ``vdn`` (``algorithms/qmix.py``) and the episode replay they learn from: QMIX's
mixer rises with every agent's Q (its gradient never negative), VDN's is the sum, one update's
loss and step equal the TD error written out with plain torch (unrolled GRU, double-Q targets from
the target networks, masked padding, Adam with the clip), the replay stores whole episodes with the
team's reward and their padding masked, the actor forgets ended episodes and anneals epsilon, and
bad settings are one line."""

from __future__ import annotations

import copy

import pytest
import torch

from algorithms.qmix import QMIX, AgentQ, QMIXActor, QMIXConfig, QMixer, QMIXLearner, VDNMixer, agent_inputs
from msrl.core import ConfigError, RunInfo
from msrl.rl import EpisodeBatch, EpisodeReplay

RUN = RunInfo(seed=3, total_env_steps=1000)


def _net(recurrent: bool = True) -> AgentQ:
    return AgentQ(4 + 3, 5, 8, recurrent, torch.Generator().manual_seed(1))


def test_qmixs_mixture_rises_with_every_agents_value() -> None:
    mixer = QMixer(3, 6, 4, 8, torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    qs = torch.randn(50, 3, generator=g, requires_grad=True)
    mixer(qs, torch.randn(50, 6, generator=g)).sum().backward()
    assert qs.grad is not None and (qs.grad >= 0).all() and (qs.grad > 0).any()
    torch.testing.assert_close(VDNMixer()(qs.detach(), torch.zeros(50, 6)), qs.detach().sum(-1))


def _episodes(batch: int = 4, length: int = 3, agents: int = 3) -> EpisodeBatch:
    g = torch.Generator().manual_seed(4)
    mask = torch.ones(batch, 1, length)
    mask[0, 0, -1] = 0.0  # the first episode is a step shorter
    terminated = torch.zeros(batch, 1, length)
    terminated[:, 0, -1] = 1.0
    terminated[0, 0, -2] = 1.0
    return EpisodeBatch(
        torch.randn(batch, 1, length + 1, agents, 4, generator=g),
        torch.randint(5, (batch, 1, length, agents), generator=g),
        torch.randn(batch, 1, length, generator=g),
        terminated,
        mask,
    )


def test_one_update_is_the_masked_double_q_td_step() -> None:
    config = QMIXConfig(gradient_steps=1, standardise_rewards=False, learning_rate=1e-2, max_grad_norm=0.5)
    learner = QMIXLearner(_net(), 3, 4, config, RUN)
    modules, target = copy.deepcopy(learner.modules), copy.deepcopy(learner.target)
    batch = _episodes()
    obs, actions, rewards, terminated, mask = batch.minibatch(0)

    def unroll(net: AgentQ) -> torch.Tensor:
        memory, values = torch.zeros(4 * 3, 8), []
        for t in range(obs.shape[1]):
            inputs = torch.cat([obs[:, t], torch.eye(3).expand(4, 3, 3)], -1).reshape(12, -1)
            x = torch.relu(net.fc(inputs))
            memory = net.rnn(x, memory)
            values.append(net.head(memory).view(4, 3, -1))
        return torch.stack(values, 1)

    q = unroll(modules["net"])
    taken = q[:, :-1].gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        best = q[:, 1:].argmax(-1, keepdim=True)
        next_q = unroll(target["net"])[:, 1:].gather(-1, best).squeeze(-1)
        y = rewards + config.gamma * (1 - terminated) * target["mixer"](next_q, obs[:, 1:].flatten(2))
    total = modules["mixer"](taken, obs[:, :-1].flatten(2))
    loss = ((total - y) ** 2 * mask).sum() / mask.sum()
    optimizer = torch.optim.Adam(modules.parameters(), lr=config.learning_rate)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(modules.parameters()), config.max_grad_norm)
    optimizer.step()
    metrics = learner.learn(batch)
    assert metrics["td_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert metrics["q_total_mean"] == pytest.approx(((total * mask).sum() / mask.sum()).item(), rel=1e-5)
    assert metrics["target_mean"] == pytest.approx(((y * mask).sum() / mask.sum()).item(), rel=1e-5)
    for ours, theirs in zip(learner.modules.parameters(), modules.parameters()):
        torch.testing.assert_close(ours, theirs)
    assert learner.updates == 1


def test_the_targets_are_copied_every_interval() -> None:
    config = QMIXConfig(gradient_steps=2, target_update_interval=2, learning_rate=1e-2)
    learner = QMIXLearner(_net(), 3, 4, config, RUN)
    batch = _episodes()
    batch = EpisodeBatch(*(torch.cat([f, f], 1) for f in batch))
    before = copy.deepcopy(learner.target.state_dict())
    learner.learn(batch)
    for key, value in learner.modules.state_dict().items():
        torch.testing.assert_close(learner.target.state_dict()[key], value)
        if key.endswith("weight"):
            assert not torch.equal(before[key], value)


def test_the_replay_stores_whole_episodes_with_the_teams_reward() -> None:
    replay = EpisodeReplay(10, 4, 2, ["a", "b"], 3, 2, batch_size=2, num_batches=3)
    for t in range(4):
        obs = {"a": torch.full((2, 2, 2), float(t)), "b": torch.full((2, 1, 2), float(t))}
        actions = {"a": torch.ones(2, 2, dtype=torch.int64), "b": torch.zeros(2, 1, dtype=torch.int64)}
        rewards = {"a": torch.tensor([[1.0, 2.0], [0.0, 0.0]]), "b": torch.tensor([[3.0], [3.0]])}
        ended = torch.tensor([1.0 if t == 2 else 0.0, 1.0 if t == 3 else 0.0])
        replay.insert(obs, actions, rewards, obs, torch.zeros(2), ended)
    assert len(replay) == 2 and replay.episodes == 2
    first, second = 0, 1  # env 0's episode ended after 3 steps, env 1's after 4
    torch.testing.assert_close(replay.mask[first], torch.tensor([1.0, 1.0, 1.0, 0.0]))
    torch.testing.assert_close(replay.terminated[first], torch.tensor([0.0, 0.0, 1.0, 0.0]))
    torch.testing.assert_close(replay.rewards[first, :3], torch.full((3,), 2.0))  # (1 + 2 + 3) / 3 agents
    torch.testing.assert_close(replay.rewards[second], torch.full((4,), 1.0))
    torch.testing.assert_close(replay.obs[second, :4, 0, 0], torch.arange(4.0))
    assert replay.actions[second, 0].tolist() == [1, 1, 0]  # groups a then b
    batch = replay.sample()
    assert batch.obs.shape == (2, 3, 5, 3, 2) and batch.mask.shape == (2, 3, 4)


def test_a_cut_episode_keeps_its_last_observation_and_bootstraps() -> None:
    """With ``final_obs``: env 0's episode is cut by the limit after 2 steps (its last observation,
    9, goes to the slot after them and its last step is not terminal), env 1's terminates (terminal,
    as always), env 2's is cut with its last observation unknown (NaN: terminal, slot zeros)."""
    replay = EpisodeReplay(10, 3, 3, ["a"], 1, 1, final_obs=True)
    actions, rewards = {"a": torch.zeros(3, 1, dtype=torch.int64)}, {"a": torch.zeros(3, 1)}
    for t in range(2):
        obs = {"a": torch.full((3, 1, 1), float(t))}
        last = {"a": torch.tensor([[[9.0]], [[8.0]], [[float("nan")]]]) if t == 1 else obs["a"]}
        terminated, truncated = torch.tensor([0.0, t, 0.0]), torch.tensor([t, 0.0, t])
        replay.insert(obs, actions, rewards, last, terminated, truncated)
    assert replay.episodes == 3
    torch.testing.assert_close(replay.terminated[:3, :2], torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    torch.testing.assert_close(
        replay.obs[:3, :3, 0, 0], torch.tensor([[0.0, 1.0, 9.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    )
    plain = EpisodeReplay(10, 3, 1, ["a"], 1, 1)  # without: every end is terminal
    for t in range(2):
        obs = {"a": torch.full((1, 1, 1), float(t))}
        plain.insert(obs, {"a": actions["a"][:1]}, {"a": rewards["a"][:1]}, obs, torch.zeros(1), torch.tensor([t]))
    torch.testing.assert_close(plain.terminated[0, :2], torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(plain.obs[0, :3, 0, 0], torch.tensor([0.0, 1.0, 0.0]))


@pytest.mark.parametrize("bootstrap", [False, True])
def test_simple_spreads_time_limit_is_terminal_unless_bootstrapped(bootstrap: bool) -> None:
    """One iteration of QMIX on simple_spread (every episode cut at 25 steps): by default each
    episode's last step is terminal and the slot after it empty; with ``bootstrap_time_limits`` the
    step bootstraps and the slot holds the environment's last observation."""
    algorithm = QMIX(QMIXConfig(num_envs=2, bootstrap_time_limits=bootstrap), RUN)
    algorithm.train_step()
    replay = algorithm.buffer
    assert replay.size == 2 and replay.mask[:2].sum() == 50
    assert replay.terminated[:2, 24].tolist() == ([0.0, 0.0] if bootstrap else [1.0, 1.0])
    assert bool((replay.obs[:2, 25] != 0).any(dim=(1, 2)).all()) is bootstrap


def test_an_episode_longer_than_its_slot_is_an_error() -> None:
    replay = EpisodeReplay(4, 2, 1, ["a"], 1, 1)
    step = ({"a": torch.zeros(1, 1, 1)}, {"a": torch.zeros(1, 1, dtype=torch.int64)}, {"a": torch.zeros(1, 1)})
    replay.insert(*step, step[0], torch.zeros(1), torch.zeros(1))
    replay.insert(*step, step[0], torch.zeros(1), torch.zeros(1))
    with pytest.raises(ValueError, match="ran past algo.episode_length"):
        replay.insert(*step, step[0], torch.zeros(1), torch.zeros(1))


def test_the_actor_forgets_ended_episodes_and_anneals_epsilon() -> None:
    config = QMIXConfig(epsilon_anneal_steps=100)
    net = AgentQ(4 + 2, 5, 8, True, torch.Generator().manual_seed(1))
    actor = QMIXActor(net, {"a": 2}, 5, RUN, (config.epsilon_start, config.epsilon_finish, config.epsilon_anneal_steps))
    obs = {"a": torch.randn(3, 2, 4)}
    assert actor.epsilon() == 1.0
    actions = actor.act(obs)
    assert actions["a"].shape == (3, 2) and actor.memory is not None
    remembered = actor.memory.clone()
    actor.act(obs)  # the next step starts from the memories, not blank ones
    _, fresh = actor.net(agent_inputs(obs["a"]).reshape(6, -1), torch.zeros(6, 8))
    _, carried = actor.net(agent_inputs(obs["a"]).reshape(6, -1), remembered)
    torch.testing.assert_close(actor.memory, carried)
    assert not torch.allclose(actor.memory, fresh)
    actor.forget(torch.tensor([0.0, 1.0, 0.0]), torch.zeros(3))
    memory = actor.memory.view(3, 2, 8)
    assert (memory[1] == 0).all() and (memory[0] != 0).any()
    actor.env_steps = 50
    assert actor.epsilon() == pytest.approx(1.0 + 0.5 * (0.05 - 1.0))
    assert agent_inputs(obs["a"]).shape == (3, 2, 6)


def test_a_single_agent_environment_and_an_unknown_mixer_are_one_line() -> None:
    with pytest.raises(ConfigError, match="qmix needs a multi-agent environment"):
        QMIX(QMIXConfig(env_id="CartPole-v1"), RUN)
    with pytest.raises(ConfigError, match="unknown algo.mixer 'sum'; valid choices: qmix, vdn"):
        QMIXConfig(mixer="sum").validate()
