"""Proximal Policy Optimization (Schulman et al., 2017) for discrete actions.

Read top to bottom: config, network, components (actor, learner), then the
algorithm whose ``train_step`` only orchestrates component calls.  Written
against msrl's public API alone, so every distribution policy runs it as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import msrl.envs
from msrl.core import (Actor, Algorithm, Batched, ConfigError, Discrete, Global, Learner, NoValue, RunInfo, deferred,
                       split, steps)
from msrl.rl import (RolloutBatch, RolloutBuffer, TwinMLP, categorical_entropy, categorical_log_prob, clip_grad_norm_,
                     ppo_losses, sample_categorical)


@dataclass
class PPOConfig:
    env_id: str = "CartPole-v1"
    """Environment id from msrl.envs."""
    num_envs: int = split(64)
    """Environments stepped together in the whole run (a per-run quantity: msrl shares them out among the
    copies of the fragments that hold the environment and the buffer)."""
    num_steps: int = 32
    """Steps per environment per iteration (rollout length)."""
    learning_rate: float = 2.5e-3
    """Adam step size."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.98
    """Discount factor."""
    gae_lambda: float = 0.8
    """GAE lambda: bias/variance trade-off of the advantage estimate."""
    update_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 8
    """Minibatches per pass."""
    clip_coef: float = 0.2
    """Surrogate clipping range."""
    clip_vloss: bool = False
    """Clip the value loss around the old value estimate.  Off by default (as in SB3): the clip is
    in return units, so with returns in the tens it holds the value function back, and on CartPole
    it made one seed in ten end below 475 (BENCHMARKS.md)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    hidden_size: int = 64
    """Width of the two hidden layers of the policy and value networks."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    def validate(self) -> None:
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size % self.num_minibatches:
            raise ConfigError(
                f"algo.num_minibatches ({self.num_minibatches}) must divide num_envs*num_steps ({self.batch_size})"
            )
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")


# -- network ---------------------------------------------------------------------------------------
def actor_critic(obs_dim: int, num_actions: int, hidden: int, seed: int) -> TwinMLP:
    """Separate policy and value MLPs (tanh), orthogonal init as in the PPO paper's code, evaluated
    together (see msrl.rl.TwinMLP for why)."""
    return TwinMLP(obs_dim, num_actions, hidden, torch.Generator().manual_seed(seed))


# -- components ------------------------------------------------------------------------------------
class PPOActor(Actor):
    """Samples actions from the current policy; keeps its own copy of the weights."""

    def __init__(self, obs_dim: int, num_actions: int, config: PPOConfig, seed: int, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.net = actor_critic(obs_dim, num_actions, config.hidden_size, seed).to(self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed + 1)

    def _obs(self, obs: Any) -> torch.Tensor:
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device)

    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[Batched, Batched, Batched]:
        logits, value = self.net(self._obs(obs))
        action, logprob = sample_categorical(logits, self.generator)
        return action, logprob, value

    @torch.inference_mode()
    def value(self, obs: Any) -> Batched:
        return self.net(self._obs(obs))[1]

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return torch.argmax(self.net(self._obs(obs))[0], dim=-1)

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        self.net.load_state_dict(weights)

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.generator.set_state(state["generator"])


class PPOLearner(Learner):
    """Clipped-surrogate PPO update over minibatch epochs."""

    def __init__(self, obs_dim: int, num_actions: int, config: PPOConfig, seed: int, num_updates: int, device: str = "cpu") -> None:
        if config.batch_size % config.num_minibatches:  # this learner's share of the batch, under every policy
            raise ConfigError(f"algo.num_minibatches ({config.num_minibatches}) must divide the batch each learner "
                              f"learns from ({config.batch_size} = its num_envs x num_steps)")
        self.config = config
        self.device = torch.device(device)
        self.net = actor_critic(obs_dim, num_actions, config.hidden_size, seed).to(self.device)
        # One parameter tensor and the fused kernel: the step is a single kernel call.
        self.optimizer = torch.optim.Adam([self.net.params], lr=config.learning_rate, eps=1e-5, fused=True)
        self.generator = torch.Generator().manual_seed(seed + 2)
        self.num_updates = max(1, num_updates)
        self.updates = 0

    def learn(self, batch: RolloutBatch) -> Global:
        cfg = self.config
        obs, actions, old_logprobs, old_values, advantages, returns = (t.to(self.device) for t in batch)
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = cfg.learning_rate * max(0.0, 1.0 - self.updates / self.num_updates)
        self.updates += 1
        n = obs.shape[0]
        minibatch = n // cfg.num_minibatches
        data = (obs, actions, old_logprobs, old_values, advantages, returns)
        params = self.net.params
        for _ in range(cfg.update_epochs):
            order = torch.randperm(n, generator=self.generator).to(self.device)
            shuffled = [t[order] for t in data]  # one gather per epoch; minibatches are then slices
            for start in range(0, n, minibatch):
                pg_loss, v_loss, logits = self._losses(*(t[start:start + minibatch] for t in shuffled))
                loss = pg_loss + cfg.vf_coef * v_loss
                if cfg.ent_coef:
                    loss = loss - cfg.ent_coef * categorical_entropy(logits).mean()
                params.grad = None
                loss.backward()
                self.sync_grads([params])
                clip_grad_norm_(params, cfg.max_grad_norm)
                self.optimizer.step()
        # Computed once the new weights are on their way to the actors: nothing waits for them.
        return deferred(self._diagnostics, *data)

    def _losses(self, obs: torch.Tensor, actions: torch.Tensor, old_logprobs: torch.Tensor, old_values: torch.Tensor,
                advantages: torch.Tensor, returns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Clipped surrogate and (clipped) value loss, with the policy's logits for the entropy bonus."""
        cfg = self.config
        logits, new_values = self.net(obs)
        pg_loss, v_loss = ppo_losses(logits, new_values, actions, old_logprobs, old_values, advantages, returns,
                                     clip=cfg.clip_coef, clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv)
        return pg_loss, v_loss, logits

    @torch.no_grad()
    def _diagnostics(self, obs: torch.Tensor, actions: torch.Tensor, old_logprobs: torch.Tensor, old_values: torch.Tensor,
                     advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
        """Losses, entropy, KL and clip fraction of the updated policy on the whole batch, once per
        update: computing them per minibatch would cost a fifth of the update's time."""
        cfg = self.config
        pg_loss, v_loss, logits = self._losses(obs, actions, old_logprobs, old_values, advantages, returns)
        log_ratio = categorical_log_prob(logits, actions) - old_logprobs
        ratio = log_ratio.exp()
        return {
            "policy_loss": float(pg_loss),
            "value_loss": float(v_loss),
            "entropy": float(categorical_entropy(logits).mean()),
            "approx_kl": float(((ratio - 1) - log_ratio).mean()),
            "clipfrac": float(((ratio - 1.0).abs() > cfg.clip_coef).float().mean()),
            "learning_rate": float(self.optimizer.param_groups[0]["lr"]),
        }

    def get_weights(self) -> Global:
        return {key: value.detach().clone() for key, value in self.net.state_dict().items()}

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])


# -- algorithm ---------------------------------------------------------------------------------------
class PPO(Algorithm):
    """PPO with GAE, clipped surrogate and value losses, entropy bonus, minibatch
    epochs, advantage normalisation and gradient clipping."""

    name = "ppo"
    Config = PPOConfig

    def __init__(self, config: PPOConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id)
        if not isinstance(spec.action_space, Discrete):
            raise ConfigError(f"ppo supports discrete actions; {config.env_id} has {type(spec.action_space).__name__}")
        obs_dim = int(np.prod(spec.observation_space.shape))
        num_actions = spec.action_space.n
        num_updates = -(-run.total_env_steps // config.batch_size)
        self.env = msrl.envs.make(config.env_id, config.num_envs, seed=run.data_seed)
        self.actor = PPOActor(obs_dim, num_actions, config, run.seed, run.device)
        self.buffer = RolloutBuffer(config.num_steps, config.num_envs, (obs_dim,), gamma=config.gamma,
                                    gae_lambda=config.gae_lambda, device=run.device)
        self.learner = PPOLearner(obs_dim, num_actions, config, run.seed, num_updates, run.device)

    def train_step(self) -> dict:
        # Rollout: step every environment num_steps times with the current policy.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            action, logprob, value = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            self.buffer.insert(obs, action, logprob, value, reward, terminated, truncated)
            obs = next_obs
        # Advantages: bootstrap from the value of the last observation, then GAE.
        last_value = self.actor.value(obs)
        batch = self.buffer.drain(last_value)
        # Update: PPO epochs over minibatches.
        metrics = self.learner.learn(batch)
        # Sync: the actor acts with the new weights from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
