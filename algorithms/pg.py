"""Policy gradient with a learned baseline: REINFORCE (``pg``; Williams, 1992) and the one-step
actor-critic (``ac``; Sutton & Barto, 2018, 13.5; Konda & Tsitsiklis, 2000).

Both raise the log-probability of each action taken in proportion to how much better it turned out
than a learned state value (the baseline) expected, and fit that value to the same return.  They
differ only in the return:

- ``pg``: the Monte-Carlo return, the discounted rewards to the episode's end (GAE's lambda 1),
  over long rollouts (``num_steps`` 500 on CartPole: whole episodes where they are short); an
  episode the rollout cuts is completed by the baseline's value of where it stopped.
- ``ac``: the one-step TD target ``r + gamma V(s')`` (lambda 0), with an update after every step of
  the environments (``num_steps`` 1): the critic bootstraps from itself at once.

The policy and the value are separate networks with their own step sizes (``policy_lr``,
``value_lr``), as Sutton and Barto write both algorithms (one Adam, a parameter group each).  The
loss is ``msrl.rl.actor_critic_loss``, A2C's and A3C's; the update runs eagerly.  Config, learner,
algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import msrl.envs
from msrl.core import (
    Algorithm,
    Box,
    ConfigError,
    Discrete,
    Global,
    Learner,
    RunInfo,
    Space,
    check_unit_interval,
    split,
    steps,
)
from msrl.rl import (
    ActorCritic,
    ActorCriticActor,
    RolloutBatch,
    RolloutBuffer,
    action_layout,
    actor_critic_loss,
    check_action_space,
    check_network,
    clip_grad_norm_,
    copy_weights,
    load_state,
    normalize_advantages,
    observation_shape,
    save_state,
)


@dataclass
class PGConfig:
    env_id: str = "CartPole-v1"
    """Environment id from msrl.envs (Discrete or Box actions, vector observations)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment."""
    num_envs: int = split(8)
    """Environments stepped together in the whole run (a per-run quantity)."""
    num_steps: int = 500
    """Steps per environment between updates."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """1: the Monte-Carlo return (REINFORCE); 0: the one-step TD target (``ac``)."""
    policy_lr: float = 1e-3
    """Adam's step size for the policy network."""
    value_lr: float = 1e-2
    """Adam's step size for the baseline (value) network."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    max_grad_norm: float = 0.0
    """Global gradient-norm clip (0: none, as the textbook algorithms)."""
    norm_adv: bool = False
    """Normalise advantages over the batch."""
    hidden_size: int = 64
    """Width of the two tanh hidden layers of the policy and of the value network."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma", "gae_lambda")
        for name in ("num_envs", "num_steps", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("policy_lr", "value_lr"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"algo.{name} must be > 0, got {getattr(self, name)}")
        if self.max_grad_norm < 0:
            raise ConfigError(f"algo.max_grad_norm must be >= 0, got {self.max_grad_norm}")


@dataclass
class ACConfig(PGConfig):
    """``pg``'s settings with the one-step actor-critic's return, an update after every step, and smaller steps."""

    num_steps: int = 1
    """Steps per environment between updates: 1, an update after every step."""
    gae_lambda: float = 0.0
    """0: the one-step TD target ``r + gamma V(s')``; 1 would be REINFORCE's return."""
    policy_lr: float = 3e-4
    """Adam's step size for the policy network (smaller than ``pg``'s: one step per env step)."""
    value_lr: float = 3e-3
    """Adam's step size for the value network."""


# -- learner -----------------------------------------------------------------------------------------
class PGLearner(Learner):
    """One Adam step on the policy gradient and the baseline's squared error, each network at its
    own step size."""

    def __init__(self, obs_dim: int, action_space: Space, config: PGConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.net = network(obs_dim, action_space, config, run.seed_for("weights")).to(self.device)
        value = list(self.net.critic.parameters())
        taken = {id(p) for p in value}
        policy = [p for p in self.net.parameters() if id(p) not in taken]
        self.params = policy + value
        self.optimizer = torch.optim.Adam(
            [{"params": policy, "lr": config.policy_lr}, {"params": value, "lr": config.value_lr}]
        )

    def learn(self, batch: RolloutBatch) -> Global:
        cfg = self.config
        obs, actions, _, _, advantages, returns = (t.to(self.device) for t in batch)
        if cfg.norm_adv:
            advantages = normalize_advantages(advantages)
        loss, terms = actor_critic_loss(self.net, obs, actions, advantages, returns, 1.0, cfg.ent_coef)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.sync_grads(self.params)
        if cfg.max_grad_norm:
            clip_grad_norm_([p.grad for p in self.params], cfg.max_grad_norm)
        self.optimizer.step()
        return dict(zip(("policy_loss", "value_loss", "entropy"), terms.tolist()))

    def get_weights(self) -> Global:
        return copy_weights(self.net)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "net", "optimizer")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "net", "optimizer")


def network(obs_dim: int, action_space: Space, config: PGConfig, seed: int) -> ActorCritic:
    """Separate policy and value MLPs (the learner's, and the actor's copy: same seed, same weights)."""
    return ActorCritic(obs_dim, action_space, config.hidden_size, seed, config.log_std_init)


# -- algorithms --------------------------------------------------------------------------------------
class PG(Algorithm):
    """REINFORCE with a learned baseline: Monte-Carlo returns over long rollouts, one update each."""

    name = "pg"
    Config = PGConfig

    def __init__(self, config: PGConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        action_space = check_action_space(config.env_id, self.name, spec.action_space, (Discrete, Box))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        check_network("mlp", config.env_id, spec.observation_space, key=f"{self.name} (an MLP)")
        obs_dim = int(np.prod(obs_shape))
        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        self.actor = ActorCriticActor(
            network(obs_dim, action_space, config, run.seed_for("weights")), run.seed_for("actor"), run.device
        )
        self.buffer = RolloutBuffer(
            config.num_steps,
            config.num_envs,
            obs_shape,
            *action_layout(action_space),
            gamma=config.gamma,
            gae_lambda=config.gae_lambda,
            device=run.device,
        )
        self.learner = PGLearner(obs_dim, action_space, config, run)

    def train_step(self) -> dict:
        # Rollout: step every environment num_steps times with the current policy.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            action, logprob, value = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            self.buffer.insert(obs, action, logprob, value, reward, terminated, truncated)
            obs = next_obs
        # Returns: Monte-Carlo (pg) or one-step TD (ac), less the baseline; cut episodes bootstrapped.
        batch = self.buffer.drain(self.actor.value(obs))
        # Update: one step of the policy and of the baseline.
        metrics = self.learner.learn(batch)
        # Sync: the actor acts with the new weights from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics


class AC(PG):
    """The one-step actor-critic: ``pg`` with the TD target and an update after every step."""

    name = "ac"
    Config = ACConfig
