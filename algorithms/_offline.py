"""What the algorithms that learn from a recorded dataset share (IQL, AWAC, CQL): their common
settings, the Gaussian policy IQL and AWAC regress, the actor the evaluation runs, and the loop,
with no environment in it: the dataset's batches (``msrl.data.DatasetReplay``), the learner's
update, the actor's weights.  The policy is evaluated greedily on ``algo.env_id`` (by default the
environment the dataset was recorded on), whose spaces the dataset's must be."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import torch
from torch import Tensor, nn

import msrl.envs
from msrl.core import Actor, Algorithm, Batched, Box, ConfigError, NoValue, RunInfo, split
from msrl.data import DatasetReplay, check_dataset_env, observation_statistics, read_info
from msrl.rl import (
    check_action_space,
    check_compile_option,
    load_state,
    load_weights,
    mlp,
    observation_shape,
    save_state,
)


@dataclass
class OfflineConfig:
    dataset: str = ""
    """The dataset's folder (``msrl record``'s ``--out``, or a Minari dataset's)."""
    env_id: str = ""
    """The environment the policy is evaluated on; empty: the one the dataset was recorded on."""
    gradient_steps: int = 1
    """Gradient steps per iteration."""
    batch_size: int = split(256)
    """Transitions per gradient step, over the whole run (each copy of the dataset samples its share)."""
    sample_strata: int = 8
    """The dataset is sampled in this many equal parts of its episodes, each part's share of every
    batch drawn by its own random stream: copies of the dataset's fragment (any number dividing
    it) each hold whole parts, so they draw the transitions one copy would (``msrl.data.DatasetReplay``)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    hidden_sizes: tuple = (256, 256)
    """Widths of the hidden layers (ReLU) of every network."""
    normalize_obs: bool = False
    """Standardise every observation by the whole dataset's mean and standard deviation, in the
    learner's batches and in the actor (CORL's ``normalize``; ``msrl.data.observation_statistics``)."""
    compile: bool | str = "auto"
    """The gradient steps as compiled regions: ``auto`` switches to them once built, ``true`` waits
    for them, ``false``: eager."""

    def validate(self) -> None:
        if not self.dataset:
            raise ConfigError("algo.dataset is required: the folder of a recorded dataset (msrl record --out DIR)")
        for name in ("gradient_steps", "batch_size", "sample_strata"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"algo.gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"algo.tau must be in (0, 1], got {self.tau}")
        check_compile_option(self.compile)

    def check_positive(self, *names: str) -> None:
        """A ``ConfigError`` naming the first of ``names`` that is not above 0."""
        for name in names:
            if not getattr(self, name) > 0:
                raise ConfigError(f"algo.{name} must be > 0, got {getattr(self, name)}")


class GaussianPolicy(nn.Module):
    """Observation -> a Gaussian over actions: its mean ``tanh`` of an MLP rescaled to the action
    bounds, its log-std one learned parameter per action dimension, clipped to [-20, 2].  The
    policy IQL and AWAC extract by weighted regression on the dataset's actions."""

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

    def mode(self, obs: Tensor) -> Tensor:
        return self(obs)

    def sample(self, obs: Tensor, noise: Tensor) -> Tensor:
        """An action drawn with standard normal ``noise``, clipped to the bounds (AWAC's ``V(s)``)."""
        action = self(obs) + noise * self.log_std.clamp(-20.0, 2.0).exp()
        return torch.maximum(torch.minimum(action, self.bias + self.scale), self.bias - self.scale)

    def log_prob(self, obs: Tensor, actions: Tensor) -> Tensor:
        """Each action's log density, summed over its dimensions: ``(batch,)``."""
        log_std = self.log_std.clamp(-20.0, 2.0)
        z = (actions - self(obs)) / log_std.exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)


class OfflineActor(Actor):
    """The policy's most likely action (``policy.mode``): offline, an actor acts only in the
    evaluation (and in ``msrl record``).  With ``obs_stats`` (the dataset's mean and standard
    deviation) it standardises the environment's observations as the learner's were."""

    def __init__(self, policy: nn.Module, run: RunInfo, obs_stats: tuple[Any, Any] | None = None) -> None:
        self.device = torch.device(run.device)
        self.policy = policy.to(self.device)
        self.mode = cast(Callable[[Tensor], Tensor], policy.mode)  # the policy's most likely action
        self.obs_stats = (
            None
            if obs_stats is None
            else tuple(torch.as_tensor(x, dtype=torch.float32, device=self.device) for x in obs_stats)
        )

    @torch.inference_mode()
    def act(self, obs: Any) -> Batched:
        return self.greedy(obs)

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        obs = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        if self.obs_stats is not None:
            mean, std = self.obs_stats
            obs = (obs - mean) / std
        return self.mode(obs)

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        load_weights(self.policy, weights)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "policy")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "policy")


class OfflineAlgorithm(Algorithm):
    """The loop of learning from data: ``dataset.sample()``, ``learner.learn(batch)``, the actor's
    weights.  A subclass names its ``learner_class`` (built as ``(obs_dim, action_space, config,
    run)``, with a ``policy`` the actor copies) and ``make_policy``."""

    learner_class: ClassVar[type]

    def __init__(self, config: Any, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        info = read_info(config.dataset)
        env_id = config.env_id or info.env_id
        if not env_id:
            raise ConfigError(f"{config.dataset} names no environment: set algo.env_id to evaluate on")
        self.eval_env = msrl.envs.spec(env_id, **info.env_kwargs)
        action_space = check_action_space(env_id, self.name, self.eval_env.action_space, (Box,))
        check_dataset_env(info, env_id, self.eval_env.observation_space, action_space)
        obs_dim = int(np.prod(observation_shape(env_id, self.eval_env.observation_space)))
        stats = observation_statistics(config.dataset) if config.normalize_obs else None
        self.dataset = DatasetReplay(
            config.dataset,
            seeds=[run.seed_for("dataset", stratum) for stratum in range(config.sample_strata)],
            batch_size=config.batch_size,
            num_batches=config.gradient_steps,
            device=run.device,
            part=run.part,
            obs_stats=stats,
        )
        generator = torch.Generator().manual_seed(run.seed_for("weights"))  # the learner's first draws
        self.actor = OfflineActor(self.make_policy(obs_dim, action_space, config, generator), run, stats)
        self.learner = self.learner_class(obs_dim, action_space, config, run)

    def make_policy(self, obs_dim: int, action_space: Box, config: Any, generator: torch.Generator) -> nn.Module:
        raise NotImplementedError

    def train_step(self) -> dict:
        # Replay: gradient_steps batches from the dataset (no environment in the loop).
        batch = self.dataset.sample()
        # Update: the learner's networks.
        metrics = self.learner.learn(batch)
        # Sync: the actor, which the evaluation runs, takes the new policy.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
