"""Advantage-Weighted Actor-Critic (Nair et al., 2020) from a recorded dataset: no environment in the loop.

Twin critics regress on ``r + gamma * min Q'(s', a')`` with ``a'`` drawn from the policy (the
critics of an off-policy actor-critic), and the policy is extracted by advantage-weighted
regression on the dataset's actions: each action's log density weighted by
``exp((Q(s, a) - V(s)) / awac_lambda)``, capped at ``max_weight``, where ``V(s)`` is the critics'
value of an action the policy draws.  Unlike IQL, the critics value the policy's own actions.  The
settings are CORL's ``awac.py`` (batch 256, Adam 3e-4 for both, tau 0.005, ``awac_lambda`` 1,
[256, 256, 256] networks, a Gaussian policy with a learned state-independent log-std); its mean is
a ``tanh`` rescaled to the action bounds here (CORL's is unbounded: D4RL's actions are in [-1, 1]).

The loop is every offline algorithm's (``algorithms/_offline.py``).  Read top to bottom: config,
learner, algorithm.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from algorithms._offline import GaussianPolicy, OfflineAlgorithm, OfflineConfig
from msrl.core import Box, Global, Learner, RunInfo
from msrl.rl import (
    GaussianHead,
    GradientStep,
    QFunctions,
    ReplayBatch,
    copy_weights,
    load_state,
    polyak_update_,
    region_key,
    save_state,
)


@dataclass
class AWACConfig(OfflineConfig):
    hidden_sizes: tuple = (256, 256, 256)
    """Widths of the hidden layers (ReLU) of the policy and the critics (CORL's three)."""
    learning_rate: float = 3e-4
    """Adam step size of the critics and the policy."""
    awac_lambda: float = 1.0
    """Temperature of the advantage weights ``exp(A / awac_lambda)`` (CORL's HalfCheetah configs: 1/3)."""
    max_weight: float = 100.0
    """The cap of each advantage weight."""

    def validate(self) -> None:
        super().validate()
        self.check_positive("learning_rate", "awac_lambda", "max_weight")


# -- learner ---------------------------------------------------------------------------------------
class AWACLearner(Learner):
    """The critics' TD step on the policy's next actions, then the policy's weighted regression."""

    def __init__(self, obs_dim: int, action_space: Box, config: AWACConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        generator = torch.Generator().manual_seed(run.seed_for("weights"))
        action_dim = int(np.prod(action_space.shape))
        self.policy = GaussianPolicy(obs_dim, action_space, config.hidden_sizes, generator).to(self.device)
        self.critic = QFunctions(obs_dim, action_dim, config.hidden_sizes, generator).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.learning_rate)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.generator = run.rng("learner")  # the policy's draws in both losses
        self.gradient_steps_taken = 0
        option, key = config.compile, region_key(config)
        self.critic_step = GradientStep(
            self.critic,
            self.critic_optimizer,
            self.critic_loss,
            0.0,
            option,
            (self.critic_target, self.policy),
            key=key,
        )
        self.policy_step = GradientStep(
            self.policy, self.policy_optimizer, self.policy_loss, 0.0, option, (self.critic,), key=key
        )

    def learn(self, batch: ReplayBatch) -> Global:
        batch = ReplayBatch(*(field.to(self.device) for field in batch))
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        sync = self.gradient_sync
        for k in range(batch.num_batches):
            obs, actions, rewards, next_obs, terminated = batch.minibatch(k)
            # The critics first, then the policy on them, then the targets (CORL's order).
            critic_terms = self.critic_step(obs, actions, rewards, next_obs, terminated, self.noise(obs), sync=sync)
            policy_terms = self.policy_step(obs, actions, self.noise(obs), sync=sync)
            polyak_update_(self.critic_target, self.critic, self.config.tau)
            totals = totals + torch.cat([critic_terms, policy_terms]).double()
            self.gradient_steps_taken += 1
        critic, policy, weight = (totals / batch.num_batches).tolist()
        return {"q_loss": critic, "policy_loss": policy, "mean_weight": weight}

    def noise(self, obs: Tensor) -> Tensor:
        """Standard normal noise for one action per observation, from the learner's generator."""
        shape = (obs.shape[0], self.policy.scale.numel())
        return GaussianHead.noise(shape, self.generator, obs.device, obs.dtype)

    def critic_loss(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, next_obs: Tensor, terminated: Tensor, noise: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Both critics' squared error against ``r + gamma * min Q'(s', a')``, ``a'`` the policy's draw."""
        with torch.no_grad():
            next_q = torch.min(*self.critic_target(next_obs, self.policy.sample(next_obs, noise)))
            target = rewards + self.config.gamma * (1.0 - terminated) * next_q
        q1, q2 = self.critic(obs, actions)
        loss = nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)
        return loss, loss.detach().unsqueeze(0)

    def policy_loss(self, obs: Tensor, actions: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
        """Advantage-weighted regression on the dataset's actions, and it and the mean weight."""
        with torch.no_grad():
            value = torch.min(*self.critic(obs, self.policy.sample(obs, noise)))
            advantage = torch.min(*self.critic(obs, actions)) - value
            weight = torch.exp(advantage / self.config.awac_lambda).clamp(max=self.config.max_weight)
        loss = -(weight * self.policy.log_prob(obs, actions)).mean()
        return loss, torch.stack([loss.detach(), weight.mean()])

    def get_weights(self) -> Global:
        return copy_weights(self.policy)

    _STATE = (
        "policy",
        "critic",
        "critic_target",
        "critic_optimizer",
        "policy_optimizer",
        "generator",
        "gradient_steps_taken",
    )

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, *self._STATE)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, *self._STATE)


# -- algorithm ---------------------------------------------------------------------------------------
class AWAC(OfflineAlgorithm):
    """AWAC: a dataset's batches, critics on the policy's actions, advantage-weighted policy."""

    name = "awac"
    Config = AWACConfig
    learner_class = AWACLearner

    def make_policy(self, obs_dim: int, action_space: Box, config: AWACConfig, generator: torch.Generator) -> nn.Module:
        return GaussianPolicy(obs_dim, action_space, config.hidden_sizes, generator)
