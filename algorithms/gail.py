"""GAIL (Ho & Ermon, 2016): imitation of recorded expert demonstrations, with PPO as its generator.

A discriminator ``D(s, a)`` (an MLP on the observation and the action, one-hot for Discrete) learns
to tell the demonstrations' state-action pairs from the policy's; the policy is PPO's, trained on
the reward ``-log(1 - D(s, a))`` of each of its own steps instead of the environment's, so it is
paid for acting as the expert did.  The environment's reward is never used for learning; its
episodes' returns are still reported, which is how imitation is judged.  The demonstrations are a
dataset (``msrl record`` of an expert's checkpoint) read by ``msrl.data.DatasetReplay``; each
iteration the discriminator takes ``discriminator_steps`` Adam steps of binary cross-entropy on the
iteration's rollout against as many demonstration pairs, then PPO learns from the rollout.

Everything else is PPO's (``algorithms/ppo.py``: its config, network, actor, rollout buffer and
learner).  The discriminator's settings follow the imitation library's GAIL (Adam at 3e-4, the
reward ``-log(1 - D)``), its network GAIL's paper's two hidden layers of 100 (tanh).

Read top to bottom: config, the discriminator, components, algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

import msrl.envs
from algorithms.ppo import PPO, PPOConfig, network
from msrl.core import Batched, Box, ConfigError, Discrete, Global, Learner, NoValue, RunInfo, split, steps
from msrl.data import DatasetReplay, check_dataset_env, read_info
from msrl.rl import (
    ActorCriticActor,
    GradientStep,
    ReplayBatch,
    RolloutBatch,
    copy_weights,
    load_state,
    load_weights,
    mlp,
    observation_shape,
    one_hot,
    region_key,
    save_state,
)


@dataclass
class GAILConfig(PPOConfig):
    demonstrations: str = ""
    """The expert's dataset (``msrl record``'s ``--out``), recorded on ``env_id``."""
    discriminator_lr: float = 3e-4
    """Adam step size of the discriminator."""
    discriminator_steps: int = 1
    """Discriminator steps per iteration, each on the whole rollout against as many expert pairs."""
    discriminator_hidden: tuple = (100, 100)
    """Widths of the discriminator's hidden layers (tanh)."""
    sample_strata: int = 8
    """Strata the demonstrations are sampled in (``msrl.data.DatasetReplay``)."""
    demo_batch: int = split(2048)
    """Expert pairs per discriminator step, over the whole run: the rollout's size by default
    (``num_envs * num_steps`` of PPO's CartPole config)."""

    def validate(self) -> None:
        super().validate()
        if not self.demonstrations:
            raise ConfigError("algo.demonstrations is required: the folder of an expert's dataset (msrl record)")
        for name in ("discriminator_steps", "sample_strata", "demo_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if not self.discriminator_lr > 0:
            raise ConfigError(f"algo.discriminator_lr must be > 0, got {self.discriminator_lr}")


# -- the discriminator ------------------------------------------------------------------------------
class Discriminator(nn.Module):
    """``(obs, action) -> logit`` of the pair being the expert's; ``reward`` is ``-log(1 - D)``,
    ``softplus(logit)``."""

    def __init__(self, obs_dim: int, action_space: Box | Discrete, hidden: tuple, generator: torch.Generator) -> None:
        super().__init__()
        self.discrete = isinstance(action_space, Discrete)
        self.actions = action_space.n if isinstance(action_space, Discrete) else int(np.prod(action_space.shape))
        self.net = mlp([obs_dim + self.actions, *hidden, 1], nn.Tanh, generator)

    def forward(self, obs: Tensor, actions: Tensor) -> Tensor:
        obs = obs.reshape(obs.shape[0], -1).float()
        if self.discrete:
            actions = one_hot(actions.reshape(-1), self.actions)
        return self.net(torch.cat((obs, actions.reshape(obs.shape[0], -1).float()), -1)).squeeze(-1)

    def reward(self, obs: Tensor, actions: Tensor) -> Tensor:
        return nn.functional.softplus(self(obs, actions))


# -- components ------------------------------------------------------------------------------------
class GAILActor(ActorCriticActor):
    """PPO's actor, which also pays each of its steps the discriminator's reward."""

    def __init__(self, discriminator: Discriminator, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.discriminator = discriminator.to(self.device)

    @torch.inference_mode()
    def imitation_reward(self, obs: Any, action: Any) -> Batched:
        """``-log(1 - D(s, a))`` of every environment's step."""
        obs = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        return self.discriminator.reward(obs, torch.as_tensor(action, device=self.device))

    def set_discriminator(self, weights: dict[str, Tensor]) -> NoValue:
        load_weights(self.discriminator, weights)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "discriminator": self.discriminator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.discriminator.load_state_dict(state["discriminator"])


class DiscriminatorLearner(Learner):
    """Binary cross-entropy steps: the demonstrations' pairs labelled 1, the rollout's 0."""

    def __init__(self, discriminator: Discriminator, config: GAILConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.discriminator = discriminator.to(self.device)
        self.optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=config.discriminator_lr)
        self.reported: dict[str, float] = {}
        self.step = GradientStep(
            self.discriminator, self.optimizer, self.loss, 0.0, config.compile, key=f"{region_key(config)}/gail"
        )

    def learn(self, expert: ReplayBatch, rollout: RolloutBatch) -> NoValue:  # type: ignore[override]
        """Its steps; what they report is in ``metrics()``, polled with every component's."""
        expert_obs, expert_actions = expert.obs[:, 0].to(self.device), expert.actions[:, 0].to(self.device)
        obs, actions = rollout.obs.to(self.device), rollout.actions.to(self.device)
        total = torch.zeros(3, dtype=torch.float64, device=self.device)
        for _ in range(self.config.discriminator_steps):
            total = total + self.step(expert_obs, expert_actions, obs, actions, sync=self.gradient_sync).double()
        loss, expert_p, policy_p = (total / self.config.discriminator_steps).tolist()
        self.reported = {"discriminator_loss": loss, "d_expert": expert_p, "d_policy": policy_p}

    def metrics(self) -> dict[str, float]:
        return self.reported

    def loss(self, expert_obs: Tensor, expert_actions: Tensor, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """The two halves' cross-entropies, each averaged over its own pairs; and it and ``D``'s
        mean on each half (detached) to report."""
        bce = nn.functional.binary_cross_entropy_with_logits
        expert, policy = self.discriminator(expert_obs, expert_actions), self.discriminator(obs, actions)
        loss = bce(expert, torch.ones_like(expert)) + bce(policy, torch.zeros_like(policy))
        terms = torch.stack(
            [loss.detach(), torch.sigmoid(expert).mean().detach(), torch.sigmoid(policy).mean().detach()]
        )
        return loss, terms

    def get_weights(self) -> Global:
        return copy_weights(self.discriminator)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "discriminator", "optimizer")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "discriminator", "optimizer")


# -- algorithm ---------------------------------------------------------------------------------------
class GAIL(PPO):
    """GAIL: PPO on the discriminator's reward, the discriminator on the demonstrations."""

    name = "gail"
    Config = GAILConfig

    def __init__(self, config: GAILConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        info = read_info(config.demonstrations)
        check_dataset_env(info, config.env_id, spec.observation_space, spec.action_space)
        obs_dim = int(np.prod(observation_shape(config.env_id, spec.observation_space)))
        action_space = spec.action_space
        assert isinstance(action_space, (Box, Discrete))

        def make_discriminator() -> Discriminator:
            generator = torch.Generator().manual_seed(run.seed_for("weights", 1))  # after the policy's
            return Discriminator(obs_dim, action_space, config.discriminator_hidden, generator)

        self.actor: GAILActor = GAILActor(
            make_discriminator(),
            network(obs_dim, action_space, config, run.seed_for("weights"), spec.observation_space),
            run.seed_for("actor"),
            run.device,
            config.normalize_obs,
            observation_shape(config.env_id, spec.observation_space),
            config.compile,
            region_key(config),
        )
        self.demos = DatasetReplay(
            config.demonstrations,
            seeds=[run.seed_for("dataset", stratum) for stratum in range(config.sample_strata)],
            batch_size=config.demo_batch,
            device=run.device,
            part=run.part,
            counts_steps=False,  # the run's steps are the environment's
        )
        self.discriminator = DiscriminatorLearner(make_discriminator(), config, run)

    def train_step(self) -> dict:
        # Rollout: PPO's, each step paid the discriminator's reward instead of the environment's.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            action, logprob, value = self.actor.act(obs)
            next_obs, _, terminated, truncated = self.env.step(action)
            reward = self.actor.imitation_reward(obs, action)
            self.buffer.insert(obs, action, logprob, value, reward, terminated, truncated)
            obs = next_obs
        batch = self.buffer.drain(self.actor.value(obs))
        # Discriminator: the demonstrations against this rollout (it reports through its metrics()).
        self.discriminator.learn(self.demos.sample(), batch)
        # Update: PPO epochs over minibatches.
        metrics = self.learner.learn(batch)
        # Sync: the actor acts and is paid with the new weights from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        self.actor.set_discriminator(self.discriminator.get_weights())
        return metrics
