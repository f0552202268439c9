"""Implicit Q-Learning (Kostrikov et al., 2022) from a recorded dataset: no environment in the loop.

A state value ``V(s)`` is fitted by expectile regression (``expectile`` above 0.5 leans it towards
the best actions the dataset took) to the target critics' ``min Q(s, a)`` at the dataset's
actions; twin critics regress on ``r + gamma * V(s')``, so no action outside the dataset is ever
valued; the policy is extracted by advantage-weighted regression, the dataset's actions' log
densities weighted by ``exp(beta * (Q - V))`` capped at ``max_weight``.  The settings are CORL's
``iql.py`` for D4RL's locomotion datasets (batch 256, Adam 3e-4 for all three networks, expectile
0.7, beta 3, tau 0.005, [256, 256] networks, a Gaussian policy with a tanh mean and a learned
state-independent log-std); CORL's cosine decay of the policy's step size and its observation and
reward normalisation are not used here.

The loop: ``dataset.sample()`` (``msrl.data.DatasetReplay``: ``gradient_steps`` batches), the
learner's updates, the actor's weights; the policy is evaluated greedily on ``algo.env_id`` (the
dataset's environment).  Read top to bottom: config, networks, components, algorithm.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

import msrl.envs
from msrl.core import Actor, Algorithm, Batched, Box, ConfigError, Global, Learner, NoValue, RunInfo, split
from msrl.data import DatasetReplay, check_dataset_env, read_info
from msrl.rl import (
    GradientStep,
    QFunctions,
    ReplayBatch,
    check_action_space,
    check_compile_option,
    copy_weights,
    load_state,
    load_weights,
    mlp,
    observation_shape,
    polyak_update_,
    region_key,
    save_state,
)


@dataclass
class IQLConfig:
    dataset: str = ""
    """The dataset's folder (``msrl record``'s ``--out``, or a Minari dataset's)."""
    env_id: str = ""
    """The environment the policy is evaluated on; empty: the one the dataset was recorded on."""
    gradient_steps: int = 1
    """Gradient steps per iteration."""
    batch_size: int = split(256)
    """Transitions per gradient step, over the whole run (each copy of the dataset samples its share)."""
    learning_rate: float = 3e-4
    """Adam step size of the value, the critics and the policy."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    expectile: float = 0.7
    """The value's expectile of the critics' values (0.5: their mean; towards 1: their maximum)."""
    beta: float = 3.0
    """Inverse temperature of the advantage weights (0: behaviour cloning)."""
    max_weight: float = 100.0
    """The cap of each advantage weight ``exp(beta * A)``."""
    hidden_sizes: tuple = (256, 256)
    """Widths of the hidden layers (ReLU) of every network."""
    compile: bool | str = "auto"
    """The three gradient steps as compiled regions: ``auto`` switches to them once built,
    ``true`` waits for them, ``false``: eager."""

    def validate(self) -> None:
        if not self.dataset:
            raise ConfigError("algo.dataset is required: the folder of a recorded dataset (msrl record --out DIR)")
        for name in ("gradient_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"algo.gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"algo.tau must be in (0, 1], got {self.tau}")
        if not 0.0 < self.expectile < 1.0:
            raise ConfigError(f"algo.expectile must be in (0, 1), got {self.expectile}")
        for name in ("learning_rate", "max_weight"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"algo.{name} must be > 0, got {getattr(self, name)}")
        if self.beta < 0:
            raise ConfigError(f"algo.beta must be >= 0, got {self.beta}")
        check_compile_option(self.compile)


# -- networks ------------------------------------------------------------------------------------
class GaussianPolicy(nn.Module):
    """Observation -> a Gaussian over actions: its mean ``tanh`` of an MLP rescaled to the action
    bounds, its log-std one learned parameter per action dimension, clipped to [-20, 2]."""

    scale: torch.Tensor  # buffers: half the action range, and its centre
    bias: torch.Tensor

    def __init__(self, obs_dim: int, action_space: Box, hidden: tuple, generator: torch.Generator) -> None:
        super().__init__()
        dim = int(np.prod(action_space.shape))
        self.net = mlp([obs_dim, *hidden, dim], nn.ReLU, generator)
        self.log_std = nn.Parameter(torch.zeros(dim))
        low = np.broadcast_to(np.asarray(action_space.low, dtype=np.float32), (dim,))
        high = np.broadcast_to(np.asarray(action_space.high, dtype=np.float32), (dim,))
        self.register_buffer("scale", torch.as_tensor((high - low) / 2.0))
        self.register_buffer("bias", torch.as_tensor((high + low) / 2.0))

    def forward(self, obs: Tensor) -> Tensor:
        """The mean action, in the environment's bounds."""
        return torch.tanh(self.net(obs)) * self.scale + self.bias

    def log_prob(self, obs: Tensor, actions: Tensor) -> Tensor:
        """Each action's log density, summed over its dimensions: ``(batch,)``."""
        log_std = self.log_std.clamp(-20.0, 2.0)
        z = (actions - self(obs)) / log_std.exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)


# -- components ------------------------------------------------------------------------------------
class IQLActor(Actor):
    """The policy's mean action: offline, an actor only acts in the evaluation."""

    def __init__(self, obs_dim: int, action_space: Box, config: IQLConfig, run: RunInfo) -> None:
        self.device = torch.device(run.device)
        weights = torch.Generator().manual_seed(run.seed_for("weights"))
        self.policy = GaussianPolicy(obs_dim, action_space, config.hidden_sizes, weights).to(self.device)

    @torch.inference_mode()
    def act(self, obs: Any) -> Batched:
        return self.greedy(obs)

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return self.policy(torch.as_tensor(obs, dtype=torch.float32, device=self.device))

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        load_weights(self.policy, weights)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "policy")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "policy")


class IQLLearner(Learner):
    """The value's expectile step, the critics' TD step and the policy's weighted regression."""

    def __init__(self, obs_dim: int, action_space: Box, config: IQLConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        generator = torch.Generator().manual_seed(run.seed_for("weights"))
        action_dim = int(np.prod(action_space.shape))
        self.policy = GaussianPolicy(obs_dim, action_space, config.hidden_sizes, generator).to(self.device)
        self.critic = QFunctions(obs_dim, action_dim, config.hidden_sizes, generator).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = mlp([obs_dim, *config.hidden_sizes, 1], nn.ReLU, generator).to(self.device)
        lr = config.learning_rate
        self.value_optimizer = torch.optim.Adam(self.value.parameters(), lr=lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)
        self.gradient_steps_taken = 0
        option, key = config.compile, region_key(config)
        self.value_step = GradientStep(
            self.value, self.value_optimizer, self.value_loss, 0.0, option, (self.critic_target,), key=key
        )
        self.critic_step = GradientStep(
            self.critic, self.critic_optimizer, self.critic_loss, 0.0, option, (self.value,), key=key
        )
        self.policy_step = GradientStep(
            self.policy,
            self.policy_optimizer,
            self.policy_loss,
            0.0,
            option,
            (self.value, self.critic_target),
            key=key,
        )

    def learn(self, batch: ReplayBatch) -> Global:
        batch = ReplayBatch(*(field.to(self.device) for field in batch))
        totals = torch.zeros(4, dtype=torch.float64, device=self.device)
        sync = self.gradient_sync
        for k in range(batch.num_batches):
            obs, actions, rewards, next_obs, terminated = batch.minibatch(k)
            # The value first, then the critics on it, then the policy on both (CORL's order).
            value_terms = self.value_step(obs, actions, sync=sync)
            critic_terms = self.critic_step(obs, actions, rewards, next_obs, terminated, sync=sync)
            policy_terms = self.policy_step(obs, actions, sync=sync)
            polyak_update_(self.critic_target, self.critic, self.config.tau)
            totals = totals + torch.cat([value_terms, critic_terms, policy_terms]).double()
            self.gradient_steps_taken += 1
        value, critic, policy, weight = (totals / batch.num_batches).tolist()
        return {"value_loss": value, "q_loss": critic, "policy_loss": policy, "mean_weight": weight}

    def value_loss(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Expectile regression of ``V(s)`` on the target critics' ``min Q(s, a)``."""
        with torch.no_grad():
            target = torch.min(*self.critic_target(obs, actions))
        diff = target - self.value(obs).squeeze(-1)
        weight = torch.abs(self.config.expectile - (diff < 0).to(diff.dtype))
        loss = (weight * diff.pow(2)).mean()
        return loss, loss.detach().unsqueeze(0)

    def critic_loss(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, next_obs: Tensor, terminated: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Both critics' squared error against ``r + gamma * V(s')`` (0 after a termination)."""
        with torch.no_grad():
            target = rewards + self.config.gamma * (1.0 - terminated) * self.value(next_obs).squeeze(-1)
        q1, q2 = self.critic(obs, actions)
        loss = nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)
        return loss, loss.detach().unsqueeze(0)

    def policy_loss(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Advantage-weighted regression on the dataset's actions, and it and the mean weight."""
        with torch.no_grad():
            advantage = torch.min(*self.critic_target(obs, actions)) - self.value(obs).squeeze(-1)
            weight = torch.exp(self.config.beta * advantage).clamp(max=self.config.max_weight)
        loss = -(weight * self.policy.log_prob(obs, actions)).mean()
        return loss, torch.stack([loss.detach(), weight.mean()])

    def get_weights(self) -> Global:
        return copy_weights(self.policy)

    _STATE = (
        "policy",
        "critic",
        "critic_target",
        "value",
        "value_optimizer",
        "critic_optimizer",
        "policy_optimizer",
        "gradient_steps_taken",
    )

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, *self._STATE)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, *self._STATE)


# -- algorithm ---------------------------------------------------------------------------------------
class IQL(Algorithm):
    """IQL: a dataset's batches, expectile value, TD critics, advantage-weighted policy."""

    name = "iql"
    Config = IQLConfig

    def __init__(self, config: IQLConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        info = read_info(config.dataset)
        env_id = config.env_id or info.env_id
        if not env_id:
            raise ConfigError(f"{config.dataset} names no environment: set algo.env_id to evaluate on")
        self.eval_env = msrl.envs.spec(env_id, **info.env_kwargs)
        action_space = check_action_space(env_id, "iql", self.eval_env.action_space, (Box,))
        check_dataset_env(info, env_id, self.eval_env.observation_space, action_space)
        obs_dim = int(np.prod(observation_shape(env_id, self.eval_env.observation_space)))
        self.dataset = DatasetReplay(
            config.dataset,
            batch_size=config.batch_size,
            num_batches=config.gradient_steps,
            seed=run.seed_for("replay"),
            device=run.device,
            part=run.part,
        )
        self.actor = IQLActor(obs_dim, action_space, config, run)
        self.learner = IQLLearner(obs_dim, action_space, config, run)

    def train_step(self) -> dict:
        # Replay: gradient_steps batches from the dataset (no environment in the loop).
        batch = self.dataset.sample()
        # Update: value, critics, policy.
        metrics = self.learner.learn(batch)
        # Sync: the actor, which the evaluation runs, takes the new policy.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
