"""Asynchronous advantage actor-critic (A3C; Mnih et al., 2016).

Each actor steps its environments ``num_steps`` times, differentiates the advantage actor-critic
loss on its own rollout at the weights it holds, and sends that gradient, not the rollout, to the
learner.  The learner applies the gradients it receives one at a time, each with its own optimiser
step, in the order of the actors that computed them, and the actors then take its weights.

A gradient computed at weights the learner has since moved past is *stale*: its staleness is the
number of optimiser steps taken since those weights.  The learner reports it every iteration (mean
and largest) and drops, and counts, gradients staler than ``max_staleness``.  Under
``async_single_learner`` the actors compute their next gradients while the learner applies the last
ones (Hogwild-style, the paper's shape); under a synchronous preset one iteration's gradients are all
computed at the same weights and applied in turn (staleness 0 to N-1 with N actors).  With one actor
(``local``, ``multi_learner``, ``single_learner_fine``: the gradient never waits) A3C takes A2C's step.

Every actor's gradient is one optimiser step, so N actors take N smaller steps per iteration where
one actor takes one step on the whole batch: the algorithm's nature, which makes A3C the one built-in
whose updates depend on how many actors a policy runs.

A gradient crosses to the learner as a batch of one row per actor (a tensor dict: each parameter's
gradient, the weights' version it was computed at, the loss terms), so the gather that brings rollouts
from N actors brings N rows here, in the actors' order.  Config, actor, learner, algorithm; the network,
the rollout buffer and the loss come from ``msrl.rl``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import msrl.envs
from msrl.core import (
    Algorithm,
    Batched,
    Box,
    ConfigError,
    Discrete,
    Global,
    Learner,
    NoValue,
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

GRAD = "grad."
"""The prefix of each parameter's gradient in the tensor dict an actor sends."""


@dataclass
class A3CConfig:
    env_id: str = "CartPole-v1"
    """Environment id from msrl.envs (Discrete or Box actions)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment."""
    num_envs: int = split(8)
    """Environments stepped together in the whole run (a per-run quantity, shared out among actors)."""
    num_steps: int = 5
    """Steps per environment per iteration: the n of the n-step return (the paper's t_max)."""
    learning_rate: float = 7e-4
    """Optimiser step size."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the run."""
    optimizer: str = "rmsprop"
    """``rmsprop`` (alpha 0.99, eps 1e-5) or ``adam``, held by the learner alone (the paper's shared
    RMSProp statistics: one set for every actor's gradients)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda; 1.0 is the paper's n-step return."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient (on half the mean squared error, as ``a2c``'s)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip of each gradient the learner applies (0: none)."""
    norm_adv: bool = False
    """Normalise advantages over each actor's rollout."""
    max_staleness: int = 32
    """Gradients computed at weights more optimiser steps old than this are dropped (and counted in
    ``dropped_gradients``); -1 applies every gradient however old."""
    network: str = "mlp"
    """The network: ``mlp``, ``nature_cnn``, ``impala_cnn`` or ``module:Class`` (``msrl.rl.actor_critic``)."""
    hidden_size: int = 64
    """Width of the two hidden layers of the policy and value networks (``network: mlp``)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""
    compile: bool | str = "auto"
    """The actor's ``act``, its gradient and the learner's application of it as compiled regions
    (``msrl.rl.GradientStep``'s halves): ``auto`` switches to each once built, ``true`` waits for
    them, ``false``: eager."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma", "gae_lambda")
        for name in ("num_envs", "num_steps", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        if self.optimizer not in ("rmsprop", "adam"):
            raise ConfigError(f"algo.optimizer must be one of: rmsprop, adam; got {self.optimizer!r}")
        if self.max_staleness < -1:
            raise ConfigError(f"algo.max_staleness must be >= 0, or -1 for no bound; got {self.max_staleness}")
        check_compile_option(self.compile)
        check_network(self.network, self.env_id, None)


def network(
    obs_dim: int, action_space: Space, config: A3CConfig, seed: int, obs_space: Space | None = None
) -> ActorCriticNet:
    """The actor-critic of ``config`` (the learner's, and the actors' copies: same seed, same weights)."""
    mlp = lambda: ActorCritic(obs_dim, action_space, config.hidden_size, seed, config.log_std_init)  # noqa: E731
    return actor_critic(config.network, obs_space, action_space, seed, mlp)


def update(net: ActorCriticNet, optimizer: torch.optim.Optimizer | None, config: A3CConfig, name: str) -> GradientStep:
    """A2C's loss on ``net`` as a ``GradientStep`` whose halves A3C splits: an actor's
    ``gradient`` (no optimizer) and the learner's ``apply``."""

    def loss(obs: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor) -> Any:
        return actor_critic_loss(net, obs, actions, advantages, returns, config.vf_coef, config.ent_coef)

    key = region_key(config)
    return GradientStep(net, optimizer, loss, config.max_grad_norm, config.compile, name=name, key=key)


# -- actor -------------------------------------------------------------------------------------------
class A3CActor(ActorCriticActor):
    """Acts with its copy of the network and differentiates the loss on its own rollouts:
    ``gradients(batch)`` is what it sends to the learner."""

    def __init__(self, net: ActorCriticNet, config: A3CConfig, run: RunInfo) -> None:
        super().__init__(net, run.seed_for("actor"), run.device, compile=config.compile, key=region_key(config))
        self.config = config
        self.version = 0  # the learner's optimiser steps behind the weights this actor holds
        self.step = update(self.net, None, config, "gradient")
        self.names = [name for name, _ in self.net.named_parameters()]

    def gradients(self, batch: RolloutBatch) -> Batched:
        """The loss's gradient at this actor's weights, as one row: ``grad.<parameter>`` (each with
        a leading axis of 1), ``version`` (the weights' version) and ``terms`` (policy, value and
        entropy losses)."""
        obs, actions, _, _, advantages, returns = (t.to(self.device) for t in batch)
        if self.config.norm_adv:
            advantages = normalize_advantages(advantages)
        grads, terms = self.step.gradient(obs, actions, advantages, returns)
        message = {GRAD + name: grad.unsqueeze(0) for name, grad in zip(self.names, grads)}
        message["version"] = torch.tensor([self.version], dtype=torch.int64, device=self.device)
        message["terms"] = terms.unsqueeze(0)
        return message

    def set_weights(self, weights: dict[str, Any]) -> NoValue:
        self.version = int(weights["version"])
        super().set_weights({key: value for key, value in weights.items() if key != "version"})

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.version = int(state["version"])


# -- learner -----------------------------------------------------------------------------------------
class A3CLearner(Learner):
    """Applies the actors' gradients one at a time, each an optimiser step, and reports staleness."""

    def __init__(
        self, obs_dim: int, action_space: Space, config: A3CConfig, run: RunInfo, obs_space: Space | None = None
    ) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.net = network(obs_dim, action_space, config, run.seed_for("weights"), obs_space).to(self.device)
        self.params = list(self.net.parameters())
        self.names = [name for name, _ in self.net.named_parameters()]
        self.optimizer: torch.optim.Optimizer
        if config.optimizer == "rmsprop":
            self.optimizer = torch.optim.RMSprop(self.params, lr=config.learning_rate, alpha=0.99, eps=1e-5)
        else:
            self.optimizer = torch.optim.Adam(self.params, lr=config.learning_rate, eps=1e-5)
        self.step = update(self.net, self.optimizer, config, "learner")
        self.num_iterations = run.num_updates(config.num_envs * config.num_steps)
        self.iterations = 0
        self.updates = 0  # optimiser steps taken: the version of the weights the actors receive

    def learn(self, gradients: dict[str, torch.Tensor]) -> Global:
        cfg = self.config
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = linear_lr(cfg.learning_rate, self.iterations, self.num_iterations)
        self.iterations += 1
        applied, staleness = [], []
        for row, version in enumerate(gradients["version"].tolist()):
            stale = self.updates - version
            if 0 <= cfg.max_staleness < stale:
                continue
            grads = [gradients[GRAD + name][row].to(self.device, copy=True) for name in self.names]
            self.step.apply(grads, sync=self.gradient_sync)
            self.updates += 1
            applied.append(row)
            staleness.append(stale)
        metrics: dict[str, float] = {
            "dropped_gradients": float(len(gradients["version"]) - len(applied)),
            "learning_rate": float(self.optimizer.param_groups[0]["lr"]),
        }
        if applied:
            terms = gradients["terms"][applied].mean(0).tolist()
            metrics.update(zip(("policy_loss", "value_loss", "entropy"), terms))
            metrics.update(staleness=sum(staleness) / len(staleness), staleness_max=float(max(staleness)))
        return metrics

    def get_weights(self) -> Global:
        return {**copy_weights(self.net), "version": torch.tensor(self.updates, dtype=torch.int64)}

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "net", "optimizer", "updates", "iterations")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "net", "optimizer", "updates", "iterations")


# -- algorithm ---------------------------------------------------------------------------------------
class A3C(Algorithm):
    """A3C: actors send gradients of their own rollouts; the learner applies each as one step."""

    name = "a3c"
    Config = A3CConfig

    def __init__(self, config: A3CConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        action_space = check_action_space(config.env_id, "a3c", spec.action_space, (Discrete, Box))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        check_network(config.network, config.env_id, spec.observation_space)
        obs_dim = int(np.prod(obs_shape))
        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        net = network(obs_dim, action_space, config, run.seed_for("weights"), spec.observation_space)
        self.actor = A3CActor(net, config, run)
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
        self.learner = A3CLearner(obs_dim, action_space, config, run, spec.observation_space)

    def train_step(self) -> dict:
        # Rollout: step every environment num_steps times with the weights this actor holds.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            action, logprob, value = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            self.buffer.insert(obs, action, logprob, value, reward, terminated, truncated)
            obs = next_obs
        # Gradients: the actor differentiates the loss on its own rollout and sends the gradient.
        gradients = self.actor.gradients(self.buffer.drain(self.actor.value(obs)))
        # Update: the learner applies each actor's gradient as one optimiser step.
        metrics = self.learner.learn(gradients)
        # Sync: the actor takes the new weights (and their version) for its next rollout.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
