"""``pg`` (REINFORCE with a baseline) and ``ac`` (the one-step actor-critic) in ``algorithms/pg.py``:
one update checked against the textbook step written out with plain torch (each network's own Adam
at its own step size), the policy moved towards the action with the positive advantage, ``ac``'s
advantages the one-step TD errors and ``pg``'s the Monte-Carlo returns less the baseline, bad
settings in one line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from algorithms.pg import AC, PG, ACConfig, PGConfig, PGLearner
from msrl.app import load_config
from msrl.core import ConfigError, Discrete, RunInfo
from msrl.rl import RolloutBatch

REPO = Path(__file__).resolve().parents[2]
SPACE = Discrete(2)
RUN = RunInfo(seed=5, total_env_steps=1000)


def _batch(rows: int = 16) -> RolloutBatch:
    g = torch.Generator().manual_seed(2)
    obs, returns = torch.randn(rows, 4, generator=g), torch.randn(rows, generator=g)
    actions, values = torch.randint(0, 2, (rows,), generator=g), torch.zeros(rows)
    return RolloutBatch(obs, actions, torch.zeros(rows), values, torch.randn(rows, generator=g), returns)


def test_one_update_is_reinforce_with_baseline_each_network_at_its_own_step_size() -> None:
    config = PGConfig(policy_lr=3e-3, value_lr=3e-2)
    learner = PGLearner(4, SPACE, config, RUN)
    net = copy.deepcopy(learner.net)
    policy_opt = torch.optim.Adam([*net.torso.parameters(), *net.head.parameters()], lr=config.policy_lr)
    value_opt = torch.optim.Adam(net.critic.parameters(), lr=config.value_lr)
    batch = _batch()
    for _ in range(2):  # the second step reads Adam's moments from the first
        logits = net.head.linear(net.torso(batch.obs))
        logp = torch.log_softmax(logits, -1).gather(1, batch.actions[:, None]).squeeze(1)
        policy_opt.zero_grad(), value_opt.zero_grad()
        (-(logp * batch.advantages).mean()).backward()
        (0.5 * (batch.returns - net.critic(batch.obs).squeeze(-1)).square().mean()).backward()
        policy_opt.step(), value_opt.step()
        metrics = learner.learn(batch)
    for ours, theirs in zip(learner.net.parameters(), net.parameters()):
        torch.testing.assert_close(ours, theirs)
    assert set(metrics) == {"policy_loss", "value_loss", "entropy"}


def test_the_policy_moves_towards_the_action_that_did_better_than_the_baseline() -> None:
    learner = PGLearner(4, SPACE, PGConfig(), RUN)
    obs = torch.ones(8, 4)
    actions = torch.tensor([0, 1] * 4)
    advantages = torch.where(actions == 0, 1.0, -1.0)
    before = torch.softmax(learner.net.policy(obs[:1]), -1)[0, 0]
    for _ in range(5):
        learner.learn(RolloutBatch(obs, actions, torch.zeros(8), torch.zeros(8), advantages, torch.zeros(8)))
    assert torch.softmax(learner.net.policy(obs[:1]), -1)[0, 0] > before + 0.01


@pytest.mark.parametrize("kind", [PG, AC])
def test_the_buffer_gives_monte_carlo_returns_to_pg_and_one_step_td_errors_to_ac(kind: type[PG]) -> None:
    config = kind.Config(num_envs=1, num_steps=3, gamma=0.5)
    algorithm = kind(config, RUN)
    rewards, values, last = [1.0, 2.0, 4.0], [0.5, -1.0, 2.0], 8.0
    for reward, value in zip(rewards, values):
        algorithm.buffer.insert(
            torch.zeros(1, 4), torch.zeros(1, dtype=torch.int64), torch.zeros(1), torch.tensor([value]),
            torch.tensor([reward]), torch.zeros(1), torch.zeros(1),
        )  # fmt: skip
    batch = algorithm.buffer.drain(torch.tensor([last]))
    nexts = [*values[1:], last]
    if kind is AC:  # r + gamma V(s') - V(s)
        expected = [r + 0.5 * v_next - v for r, v, v_next in zip(rewards, values, nexts)]
    else:  # the discounted rewards to the rollout's end, completed by V(last), less V(s)
        returns = [1 + 0.5 * 2 + 0.25 * 4 + 0.125 * 8, 2 + 0.5 * 4 + 0.25 * 8, 4 + 0.5 * 8]
        expected = [g - v for g, v in zip(returns, values)]
    torch.testing.assert_close(batch.advantages.flatten(), torch.tensor(expected))


def test_ac_is_pg_with_the_td_target_and_an_update_every_step() -> None:
    assert (ACConfig().num_steps, ACConfig().gae_lambda) == (1, 0.0)
    assert (PGConfig().num_steps, PGConfig().gae_lambda) == (500, 1.0)


@pytest.mark.parametrize(
    ("config", "setting", "message"),
    [
        ("pg_cartpole", "algo.value_lr=0", "algo.value_lr must be > 0"),
        ("ac_cartpole", "algo.gae_lambda=2", r"algo.gae_lambda must be in \[0, 1\]"),
        ("ac_cartpole", "algo.max_grad_norm=-1", "algo.max_grad_norm must be >= 0"),
    ],
)
def test_bad_settings_get_one_line(config: str, setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(str(REPO / "configs" / f"{config}.yaml"), [setting]).algo.validate()


def test_frames_are_refused_in_one_line_naming_the_mlp() -> None:
    with pytest.raises(ConfigError, match="takes vector observations"):
        PG(PGConfig(env_id="MinAtar/Breakout-v1"), RUN)
