"""Advantage Actor-Critic, synchronous (A2C; Mnih et al., 2016, as OpenAI Baselines and SB3 run it).

Every iteration steps all environments ``num_steps`` times, then takes one gradient step on the
whole rollout: policy gradient with advantages from GAE (``gae_lambda=1`` gives A2C's n-step
returns, bootstrapped from the value of the last observation), value regression and an entropy
bonus.  Config, learner, algorithm; the actor, network and buffer come from ``msrl.rl``.
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
    ActorCriticNet,
    GradientStep,
    RolloutBatch,
    RolloutBuffer,
    action_layout,
    actor_critic,
    actor_critic_loss,
    check_action_space,
    check_compile_option,
    check_network,
    copy_weights,
    linear_lr,
    load_state,
    normalize_advantages,
    observation_dtype,
    observation_shape,
    region_key,
    save_state,
)


@dataclass
class A2CConfig:
    env_id: str = "CartPole-v1"
    """Environment id from msrl.envs (Discrete or Box actions)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment (``ALE/Pong-v5``: ``episodic_life``, ``noop_max``...)."""
    num_envs: int = split(8)
    """Environments stepped together in the whole run (a per-run quantity)."""
    num_steps: int = 5
    """Steps per environment per iteration: the n of the n-step return."""
    learning_rate: float = 7e-4
    """Optimiser step size."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the run."""
    optimizer: str = "rmsprop"
    """``rmsprop`` (alpha 0.99, eps 1e-5, as in the paper and SB3) or ``adam``."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda; 1.0 is the classic n-step return."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient; the value loss is half the mean squared error (CleanRL's), so SB3's
    ``vf_coef`` (on the mean squared error) is this one halved."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    norm_adv: bool = False
    """Normalise advantages over the batch."""
    network: str = "mlp"
    """The network: ``mlp``, ``nature_cnn``, ``impala_cnn`` or ``module:Class`` (``msrl.rl.actor_critic``)."""
    hidden_size: int = 64
    """Width of the two hidden layers of the policy and value networks (``network: mlp``)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""
    compile: bool | str = "auto"
    """The gradient step (loss, gradient, clip, optimiser) and the actor's ``act`` as compiled
    regions: ``auto`` switches to them once built, ``true`` waits for them, ``false``: eager."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma", "gae_lambda")
        for name in ("num_envs", "num_steps", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        if self.optimizer not in ("rmsprop", "adam"):
            raise ConfigError(f"algo.optimizer must be one of: rmsprop, adam; got {self.optimizer!r}")
        check_compile_option(self.compile)
        check_network(self.network, self.env_id, None)


# -- learner -----------------------------------------------------------------------------------------
class A2CLearner(Learner):
    """One gradient step per rollout on policy-gradient, value and entropy losses."""

    def __init__(
        self, obs_dim: int, action_space: Space, config: A2CConfig, run: RunInfo, obs_space: Space | None = None
    ) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.net = network(obs_dim, action_space, config, run.seed_for("weights"), obs_space).to(self.device)
        params = list(self.net.parameters())
        self.optimizer: torch.optim.Optimizer
        if config.optimizer == "rmsprop":
            self.optimizer = torch.optim.RMSprop(params, lr=config.learning_rate, alpha=0.99, eps=1e-5)
        else:
            self.optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=1e-5, fused=True)
        self.gradient_step = GradientStep(
            self.net, self.optimizer, self.loss, config.max_grad_norm, config.compile, key=region_key(config)
        )
        self.num_updates = run.num_updates(config.num_envs * config.num_steps)
        self.updates = 0

    def learn(self, batch: RolloutBatch) -> Global:
        cfg = self.config
        obs, actions, _, _, advantages, returns = (t.to(self.device) for t in batch)
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = linear_lr(cfg.learning_rate, self.updates, self.num_updates)
        self.updates += 1
        if cfg.norm_adv:
            advantages = normalize_advantages(advantages)
        terms = self.gradient_step(obs, actions, advantages, returns, sync=self.gradient_sync)
        metrics: dict[str, float] = dict(zip(("policy_loss", "value_loss", "entropy"), terms.tolist()))  # one sync
        metrics["learning_rate"] = float(self.optimizer.param_groups[0]["lr"])
        return metrics

    def loss(
        self, obs: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss to minimise, and its policy, value and entropy terms (detached) to report."""
        cfg = self.config
        return actor_critic_loss(self.net, obs, actions, advantages, returns, cfg.vf_coef, cfg.ent_coef)

    def get_weights(self) -> Global:
        return copy_weights(self.net)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "net", "optimizer", "updates")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "net", "optimizer", "updates")


def network(
    obs_dim: int, action_space: Space, config: A2CConfig, seed: int, obs_space: Space | None = None
) -> ActorCriticNet:
    """The actor-critic of ``config`` (the learner's, and the actors' copies: same seed, same weights)."""
    mlp = lambda: ActorCritic(obs_dim, action_space, config.hidden_size, seed, config.log_std_init)  # noqa: E731
    return actor_critic(config.network, obs_space, action_space, seed, mlp)


# -- algorithm ---------------------------------------------------------------------------------------
class A2C(Algorithm):
    """A2C: n-step (or GAE) advantages, one synchronous update per rollout."""

    name = "a2c"
    Config = A2CConfig

    def __init__(self, config: A2CConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        action_space = check_action_space(config.env_id, "a2c", spec.action_space, (Discrete, Box))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        check_network(config.network, config.env_id, spec.observation_space)
        obs_dim = int(np.prod(obs_shape))
        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        self.actor = ActorCriticActor(
            network(obs_dim, action_space, config, run.seed_for("weights"), spec.observation_space),
            run.seed_for("actor"),
            run.device,
            compile=config.compile,
            key=region_key(config),
        )
        self.buffer = RolloutBuffer(
            config.num_steps,
            config.num_envs,
            obs_shape,
            *action_layout(action_space),
            gamma=config.gamma,
            gae_lambda=config.gae_lambda,
            device=run.device,
            obs_dtype=observation_dtype(spec.observation_space),
        )
        self.learner = A2CLearner(obs_dim, action_space, config, run, spec.observation_space)

    def train_step(self) -> dict:
        # Rollout: step every environment num_steps times with the current policy.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            action, logprob, value = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            self.buffer.insert(obs, action, logprob, value, reward, terminated, truncated)
            obs = next_obs
        # Returns: n-step (GAE) targets bootstrapped from the value of the last observation.
        batch = self.buffer.drain(self.actor.value(obs))
        # Update: one gradient step on the whole rollout.
        metrics = self.learner.learn(batch)
        # Sync: the actor acts with the new weights from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
