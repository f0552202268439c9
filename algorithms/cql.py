"""Conservative Q-Learning (Kumar et al., 2020), CQL(H) on SAC, from a recorded dataset: no
environment in the loop.

SAC's update (twin critics, a tanh-squashed Gaussian policy, a tuned entropy temperature,
Polyak targets) with a conservative term in each critic's loss: ``cql_alpha`` times the soft
maximum of the critic over actions the dataset did not take (``cql_n_actions`` uniformly random
ones, and as many drawn from the policy at ``s`` and at ``s'``, each less its log density: the
importance-sampled estimate of ``log sum exp Q(s, .)``) less its value of the dataset's action.
Values of actions outside the data are pushed down, those in it up.  The settings are CORL's
``cql.py`` for D4RL's locomotion datasets (batch 256, policy Adam 3e-5 and its temperature's too,
critics 3e-4, tau 0.005, ``cql_alpha`` 10, 10 actions, temperature 1, the target entropy
``-dim(A)``, [256, 256, 256] networks, no entropy in the target); not used here: CORL's orthogonal
initialisation, its observation normalisation and its Lagrange variant.  CORL takes the policy's
and the critics' losses from the same parameters; here the critics step first and the policy
steps on them, as msrl's SAC does.

The loop is every offline algorithm's (``algorithms/_offline.py``).  Read top to bottom: config,
learner, algorithm.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from algorithms._offline import OfflineAlgorithm, OfflineConfig
from algorithms.sac import SquashedGaussianPolicy, Temperature, policy_loss, temperature_loss
from msrl.core import Box, ConfigError, Global, Learner, RunInfo
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
class CQLConfig(OfflineConfig):
    hidden_sizes: tuple = (256, 256, 256)
    """Widths of the hidden layers (ReLU) of the policy and the critics (CORL's three)."""
    policy_lr: float = 3e-5
    """Adam step size of the policy and of the entropy temperature."""
    q_lr: float = 3e-4
    """Adam step size of the critics."""
    cql_alpha: float = 10.0
    """Weight of the conservative term in each critic's loss."""
    cql_n_actions: int = 10
    """Random and policy actions per state in the conservative term's soft maximum."""
    cql_temp: float = 1.0
    """Temperature of that soft maximum."""
    alpha: float = 1.0
    """The entropy temperature's initial value (tuned towards a target entropy of -dim(A))."""

    def validate(self) -> None:
        super().validate()
        self.check_positive("policy_lr", "q_lr", "cql_temp", "alpha")
        if self.cql_alpha < 0:
            raise ConfigError(f"algo.cql_alpha must be >= 0, got {self.cql_alpha}")
        if self.cql_n_actions < 1:
            raise ConfigError(f"algo.cql_n_actions must be >= 1, got {self.cql_n_actions}")


# -- learner ---------------------------------------------------------------------------------------
class CQLLearner(Learner):
    """SAC's three steps, the critics' with the conservative term."""

    def __init__(self, obs_dim: int, action_space: Box, config: CQLConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        generator = torch.Generator().manual_seed(run.seed_for("weights"))
        self.action_dim = int(np.prod(action_space.shape))
        policy = SquashedGaussianPolicy(obs_dim, action_space, config.hidden_sizes, generator, "clamp")
        self.policy = policy.to(self.device)
        self.critic = QFunctions(obs_dim, self.action_dim, config.hidden_sizes, generator).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.temperature = Temperature(config.alpha, autotune=True).to(self.device)
        self.log_alpha = self.temperature.log_alpha
        self.target_entropy = -float(self.action_dim)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.q_lr)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.policy_lr)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.policy_lr)
        self.generator = run.rng("learner")  # the policy's draws and the random actions
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
        self.alpha_step = GradientStep(
            self.temperature, self.alpha_optimizer, self.alpha_loss, 0.0, option, key=f"{key}/{self.target_entropy}"
        )

    def learn(self, batch: ReplayBatch) -> Global:
        batch = ReplayBatch(*(field.to(self.device) for field in batch))
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        sync, n = self.gradient_sync, self.config.cql_n_actions
        for k in range(batch.num_batches):
            obs, actions, rewards, next_obs, terminated = batch.minibatch(k)
            alpha = self.log_alpha.detach().exp()
            rows = obs.shape[0]
            draws = (self.noise(rows), self.noise(rows * n), self.noise(rows * n), self.uniform(rows * n))
            critic_terms = self.critic_step(obs, actions, rewards, next_obs, terminated, *draws, sync=sync)
            policy_loss, logprob = self.policy_step(obs, self.noise(rows), alpha, sync=sync)
            self.alpha_step(logprob, sync=sync)
            polyak_update_(self.critic_target, self.critic, self.config.tau)
            totals = totals + torch.cat([critic_terms, policy_loss.unsqueeze(0)]).double()
            self.gradient_steps_taken += 1
        q_loss, cql_gap, policy_loss_mean = (totals / batch.num_batches).tolist()
        return {
            "q_loss": q_loss,
            "cql_gap": cql_gap,
            "policy_loss": policy_loss_mean,
            "alpha": self.log_alpha.detach().exp().item(),
        }

    def noise(self, rows: int) -> Tensor:
        """Standard normal noise for ``rows`` policy draws, from the learner's generator."""
        return GaussianHead.noise((rows, self.action_dim), self.generator, self.device, torch.float32)

    def uniform(self, rows: int) -> Tensor:
        """``rows`` actions uniform in (-1, 1), the policy's own units, from the learner's generator."""
        return torch.rand((rows, self.action_dim), generator=self.generator, device=self.device) * 2 - 1

    def critic_loss(
        self,
        obs: Tensor,
        actions: Tensor,
        rewards: Tensor,
        next_obs: Tensor,
        terminated: Tensor,
        next_noise: Tensor,
        here_noise: Tensor,
        there_noise: Tensor,
        uniform: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """Both critics' TD error on ``r + gamma * min Q'(s', a')`` plus ``cql_alpha`` times each
        one's soft maximum over other actions less its value of the dataset's; the TD part and the
        conservative gap (detached) to report."""
        cfg, n = self.config, self.config.cql_n_actions
        with torch.no_grad():
            next_actions, _ = self.policy.sample(next_obs, None, next_noise)
            target = rewards + cfg.gamma * (1.0 - terminated) * torch.min(*self.critic_target(next_obs, next_actions))
            repeated = obs.repeat_interleave(n, 0)  # each state n times, for n actions apiece
            here, here_logp = self.policy.sample(repeated, None, here_noise)
            there, there_logp = self.policy.sample(next_obs.repeat_interleave(n, 0), None, there_noise)
            random = uniform * self.policy.scale + self.policy.bias
        q1, q2 = self.critic(obs, actions)
        td = nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)
        # log sum exp over the other actions, each less the log density it was drawn with (in the
        # policy's (-1, 1) units, where the uniform's density is 0.5 per dimension)
        uniform_logp = torch.full_like(here_logp, self.action_dim * math.log(0.5))
        tried = [(random, uniform_logp), (there, there_logp), (here, here_logp)]
        values = [self.critic(repeated, a) for a, _ in tried]  # per draw: (q1, q2), each (rows * n,)
        gap = torch.zeros((), device=obs.device)
        for index, q in enumerate((q1, q2)):
            scores = torch.cat([(v[index] - logp).reshape(-1, n) for v, (_, logp) in zip(values, tried)], 1)
            soft_max = torch.logsumexp(scores / cfg.cql_temp, dim=1) * cfg.cql_temp
            gap = gap + (soft_max - q).mean()
        loss = td + cfg.cql_alpha * gap
        return loss, torch.stack([td.detach(), gap.detach() / 2])

    def policy_loss(self, obs: Tensor, noise: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """SAC's (``algorithms.sac.policy_loss``)."""
        return policy_loss(self.policy, self.critic, obs, noise, alpha)

    def alpha_loss(self, logprob: Tensor) -> tuple[Tensor, Tensor]:
        """SAC's (``algorithms.sac.temperature_loss``)."""
        return temperature_loss(self.temperature, logprob, self.target_entropy)

    def get_weights(self) -> Global:
        return copy_weights(self.policy)

    _STATE = (
        "policy",
        "critic",
        "critic_target",
        "log_alpha",
        "critic_optimizer",
        "policy_optimizer",
        "alpha_optimizer",
        "generator",
        "gradient_steps_taken",
    )

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, *self._STATE)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, *self._STATE)


# -- algorithm ---------------------------------------------------------------------------------------
class CQL(OfflineAlgorithm):
    """CQL: a dataset's batches, SAC's update with conservative critics."""

    name = "cql"
    Config = CQLConfig
    learner_class = CQLLearner

    def make_policy(self, obs_dim: int, action_space: Box, config: CQLConfig, generator: torch.Generator) -> nn.Module:
        return SquashedGaussianPolicy(obs_dim, action_space, config.hidden_sizes, generator, "clamp")
