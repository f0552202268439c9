"""Implicit Q-Learning (Kostrikov et al., 2022) from a recorded dataset: no environment in the loop.

A state value ``V(s)`` is fitted by expectile regression (``expectile`` above 0.5 leans it towards
the best actions the dataset took) to the target critics' ``min Q(s, a)`` at the dataset's
actions; twin critics regress on ``r + gamma * V(s')``, so no action outside the dataset is ever
valued; the policy is extracted by advantage-weighted regression, the dataset's actions' log
densities weighted by ``exp(beta * (Q - V))`` capped at ``max_weight``.  The settings are CORL's
``iql.py`` for D4RL's locomotion datasets (batch 256, Adam 3e-4 for all three networks, expectile
0.7, beta 3, tau 0.005, [256, 256] networks, a Gaussian policy with a tanh mean and a learned
state-independent log-std, the policy's step size decayed by a cosine with ``policy_lr_decay``);
CORL's observation and reward normalisation are not used here.

The loop is every offline algorithm's (``algorithms/_offline.py``): the dataset's batches, the
learner's updates, the actor's weights; the policy is evaluated greedily on the dataset's
environment.  Read top to bottom: config, learner, algorithm.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from algorithms._offline import GaussianPolicy, OfflineAlgorithm, OfflineConfig
from msrl.core import Box, ConfigError, Global, Learner, RunInfo
from msrl.rl import (
    GradientStep,
    QFunctions,
    ReplayBatch,
    copy_weights,
    load_state,
    mlp,
    polyak_update_,
    region_key,
    save_state,
)


@dataclass
class IQLConfig(OfflineConfig):
    learning_rate: float = 3e-4
    """Adam step size of the value, the critics and the policy."""
    expectile: float = 0.7
    """The value's expectile of the critics' values (0.5: their mean; towards 1: their maximum)."""
    beta: float = 3.0
    """Inverse temperature of the advantage weights (0: behaviour cloning)."""
    max_weight: float = 100.0
    """The cap of each advantage weight ``exp(beta * A)``."""
    policy_lr_decay: bool = False
    """Decay the policy's step size to 0 over the run's gradient steps by a cosine (CORL's schedule)."""

    def validate(self) -> None:
        super().validate()
        if not 0.0 < self.expectile < 1.0:
            raise ConfigError(f"algo.expectile must be in (0, 1), got {self.expectile}")
        self.check_positive("learning_rate", "max_weight")
        if self.beta < 0:
            raise ConfigError(f"algo.beta must be >= 0, got {self.beta}")


# -- components ------------------------------------------------------------------------------------
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
        self.total_gradient_steps = run.num_updates(config.batch_size)
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
            if self.config.policy_lr_decay:
                done = min(self.gradient_steps_taken / self.total_gradient_steps, 1.0)
                self.policy_optimizer.param_groups[0]["lr"] = (
                    self.config.learning_rate * 0.5 * (1 + math.cos(math.pi * done))
                )
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
class IQL(OfflineAlgorithm):
    """IQL: a dataset's batches, expectile value, TD critics, advantage-weighted policy."""

    name = "iql"
    Config = IQLConfig
    learner_class = IQLLearner

    def make_policy(self, obs_dim: int, action_space: Box, config: IQLConfig, generator: torch.Generator) -> nn.Module:
        return GaussianPolicy(obs_dim, action_space, config.hidden_sizes, generator)
