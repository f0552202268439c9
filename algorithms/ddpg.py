"""DDPG (Lillicrap et al., 2016) and TD3 (Fujimoto et al., 2018) for continuous actions: a
deterministic policy explored with Gaussian noise, critics regressed on a target computed with
target networks, and a policy that climbs the first critic's gradient.  TD3 is DDPG with three
changes, each an option here: twin critics whose minimum is the target (``twin_critics``), the
target's action smoothed with clipped noise (``target_noise``), and the policy and the targets
updated every ``policy_frequency`` critic steps (CleanRL's DDPG delays them too).

The loop is SAC's: every iteration steps the environments ``train_frequency`` times (uniformly
random actions until ``learning_starts`` transitions are in) into a replay buffer, and the learner
takes ``gradient_steps`` steps on sampled batches.  Noise is in units of half the action range, as
CleanRL and SB3 draw it.  Read top to bottom: config, policy, components, algorithm.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

import msrl.envs
from msrl.core import (
    Actor,
    Algorithm,
    Batched,
    Box,
    ConfigError,
    Global,
    Learner,
    NoValue,
    RunInfo,
    check_unit_interval,
    split,
    steps,
)
from msrl.rl import (
    CompiledCall,
    GradientStep,
    QFunctions,
    ReplayBatch,
    ReplayBuffer,
    action_layout,
    check_action_space,
    check_compile_option,
    copy_weights,
    keeps_final_obs,
    load_state,
    load_weights,
    mlp,
    observation_shape,
    polyak_update_,
    region_key,
    save_state,
)


@dataclass
class DDPGConfig:
    """CleanRL's ``ddpg_continuous_action.py`` defaults (its MuJoCo settings)."""

    env_id: str = "Pendulum-v1"
    """Environment id from msrl.envs (Box actions)."""
    num_envs: int = split(1)
    """Environments stepped together in the whole run (a per-run quantity)."""
    train_frequency: int = 1
    """Steps per environment between updates (an iteration)."""
    gradient_steps: int = 1
    """Critic steps per update."""
    batch_size: int = split(256)
    """Transitions per gradient step, over the whole run (each buffer copy samples its share)."""
    buffer_size: int = split(1_000_000)
    """Replay capacity in transitions, over the whole run."""
    learning_starts: int = split(25_000)
    """Transitions collected with uniformly random actions before the first update (per run)."""
    policy_lr: float = 3e-4
    """Adam step size of the policy."""
    q_lr: float = 3e-4
    """Adam step size of the critics."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target policy and critics."""
    policy_frequency: int = 2
    """Critic steps per policy step; the targets follow at each policy step."""
    exploration_noise: float = 0.1
    """Standard deviation of the Gaussian noise added to the policy's actions while collecting."""
    twin_critics: bool = False
    """Two critics, the target the smaller of their target networks' values (TD3's clipped double Q)."""
    target_noise: float = 0.0
    """Standard deviation of the noise added to the target policy's action (TD3's smoothing; 0: none)."""
    target_noise_clip: float = 0.5
    """Bound of that noise."""
    hidden_sizes: tuple = (256, 256)
    """Widths of the hidden layers (ReLU) of the policy and the critics."""
    bootstrap_time_limits: bool = False
    """Store a transition cut by the time limit with its episode's last observation (the
    environment's ``final_obs()``), bootstrapped, as SB3's replay does; false drops it."""
    compile: bool | str = "auto"
    """The critics' and the policy's gradient steps and the actor's action, each as a compiled
    region: ``auto`` switches to them once built, ``true`` waits for them, ``false``: eager."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma")
        for name in ("num_envs", "train_frequency", "gradient_steps", "batch_size", "buffer_size", "policy_frequency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("policy_lr", "q_lr"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"algo.{name} must be > 0, got {getattr(self, name)}")
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"algo.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"algo.tau must be in (0, 1], got {self.tau}")
        check_compile_option(self.compile)


@dataclass
class TD3Config(DDPGConfig):
    """CleanRL's ``td3_continuous_action.py`` defaults: DDPG's, with twin critics and the target
    action smoothed by noise of 0.2 clipped to 0.5."""

    twin_critics: bool = True
    target_noise: float = 0.2


# -- the policy -------------------------------------------------------------------------------------
class DeterministicPolicy(nn.Module):
    """Observation -> action: an MLP, tanh, rescaled to the action bounds."""

    scale: torch.Tensor  # buffers (registered in __init__): half the action range, and its centre
    bias: torch.Tensor

    def __init__(self, obs_dim: int, action_space: Box, hidden: tuple, generator: torch.Generator) -> None:
        super().__init__()
        dim = int(np.prod(action_space.shape))
        self.net = mlp([obs_dim, *hidden, dim], nn.ReLU, generator)
        low = np.broadcast_to(np.asarray(action_space.low, dtype=np.float32), (dim,))
        high = np.broadcast_to(np.asarray(action_space.high, dtype=np.float32), (dim,))
        self.register_buffer("scale", torch.as_tensor((high - low) / 2.0))
        self.register_buffer("bias", torch.as_tensor((high + low) / 2.0))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.scale + self.bias

    def explore(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The action plus ``noise`` (in half-ranges), kept within the bounds."""
        return self.clamp(self(obs) + noise * self.scale)

    def clamp(self, action: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(action, self.bias + self.scale), self.bias - self.scale)


# -- components ------------------------------------------------------------------------------------
class DDPGActor(Actor):
    """Uniformly random actions for the first ``learning_starts`` transitions, then the policy's
    action plus Gaussian noise."""

    def __init__(self, obs_dim: int, action_space: Box, config: DDPGConfig, run: RunInfo) -> None:
        self.device = torch.device(run.device)
        weights = torch.Generator().manual_seed(run.seed_for("weights"))
        self.policy = DeterministicPolicy(obs_dim, action_space, config.hidden_sizes, weights).to(self.device)
        self.generator = run.rng("actor")  # this copy's own draws, so copies explore independently
        self.learning_starts, self.noise = config.learning_starts, config.exploration_noise
        self.env_steps = 0
        self.explore = CompiledCall(self.policy, DeterministicPolicy.explore, config.compile, key=region_key(config))

    def _obs(self, obs: Any) -> torch.Tensor:
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device)

    @torch.inference_mode()
    def act(self, obs: Any) -> Batched:
        obs = self._obs(obs)
        self.env_steps += obs.shape[0]
        shape = (obs.shape[0], self.policy.scale.numel())
        if self.env_steps <= self.learning_starts:
            uniform = torch.rand(shape, generator=self.generator, device=self.device) * 2 - 1
            return uniform * self.policy.scale + self.policy.bias
        noise = torch.randn(shape, generator=self.generator, device=self.device) * self.noise
        return self.explore(obs, noise)

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return self.policy(self._obs(obs))

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        load_weights(self.policy, weights)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "policy", "generator", "env_steps")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "policy", "generator", "env_steps")


class DDPGLearner(Learner):
    """The critics' regression on the target networks' values, the policy's ascent of the first
    critic, and the targets' Polyak averaging at each policy step."""

    def __init__(self, obs_dim: int, action_space: Box, config: DDPGConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        generator = torch.Generator().manual_seed(run.seed_for("weights"))
        action_dim = int(np.prod(action_space.shape))
        self.policy = DeterministicPolicy(obs_dim, action_space, config.hidden_sizes, generator).to(self.device)
        critics = 2 if config.twin_critics else 1
        self.critic = QFunctions(obs_dim, action_dim, config.hidden_sizes, generator, critics).to(self.device)
        self.policy_target = copy.deepcopy(self.policy).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.q_lr, fused=True)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.policy_lr, fused=True)
        self.generator = run.rng("learner")  # the target actions' smoothing noise
        self.gradient_steps_taken = 0
        clip, option, key = 0.0, config.compile, region_key(config)
        critic_reads = (self.critic_target, self.policy_target)
        self.critic_step = GradientStep(
            self.critic, self.critic_optimizer, self.critic_loss, clip, option, critic_reads, key=key
        )
        self.policy_step = GradientStep(
            self.policy, self.policy_optimizer, self.policy_loss, clip, option, (self.critic,), key=key
        )

    def learn(self, batch: ReplayBatch) -> Global:
        cfg = self.config
        if batch.rewards.shape[0] == 0:
            return {}  # warm-up: the buffer holds too few transitions yet
        batch = ReplayBatch(*(field.to(self.device) for field in batch))
        # Losses add up on the device, in float64 (a Python float's precision), and reach the host once, at the end.
        q_total = policy_total = torch.zeros((), dtype=torch.float64, device=self.device)
        policy_steps = 0
        sync = self.gradient_sync
        for k in range(batch.num_batches):
            obs, actions, rewards, next_obs, terminated = batch.minibatch(k)
            # Critics: regress on the target networks' value of the (smoothed) target action.
            replayed = (obs, actions, rewards, next_obs, terminated, self.noise(actions))
            q_total = q_total + self.critic_step(*replayed, sync=sync)[0].double()
            self.gradient_steps_taken += 1
            # Policy and targets, every policy_frequency critic steps.
            if self.gradient_steps_taken % cfg.policy_frequency == 0:
                policy_total = policy_total + self.policy_step(obs, sync=sync)[0].double()
                policy_steps += 1
                polyak_update_(self.policy_target, self.policy, cfg.tau)
                polyak_update_(self.critic_target, self.critic, cfg.tau)
        q_sum, policy_sum = torch.stack([q_total, policy_total]).tolist()
        return {"q_loss": q_sum / batch.num_batches, "policy_loss": policy_sum / max(1, policy_steps)}

    def noise(self, actions: Tensor) -> Tensor:
        """The target actions' smoothing noise (half-ranges, clipped), from the learner's generator."""
        noise = torch.randn(actions.shape, generator=self.generator, device=self.device) * self.config.target_noise
        return noise.clamp(-self.config.target_noise_clip, self.config.target_noise_clip)

    def critic_loss(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, next_obs: Tensor, terminated: Tensor, noise: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Each critic's squared error against the target, summed, and it (detached) to report."""
        with torch.no_grad():
            next_actions = self.policy_target.explore(next_obs, noise)
            next_q = torch.stack(self.critic_target(next_obs, next_actions)).min(0).values
            target = rewards + self.config.gamma * (1.0 - terminated) * next_q
        loss = sum(nn.functional.mse_loss(q, target) for q in self.critic(obs, actions))
        assert isinstance(loss, Tensor)
        return loss, loss.detach().unsqueeze(0)

    def policy_loss(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Minus the first critic's value of the policy's actions, and it (detached) to report."""
        loss = -self.critic(obs, self.policy(obs))[0].mean()
        return loss, loss.detach().unsqueeze(0)

    def get_weights(self) -> Global:
        return copy_weights(self.policy)

    _STATE = (
        "policy",
        "critic",
        "policy_target",
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


# -- algorithms --------------------------------------------------------------------------------------
class DDPG(Algorithm):
    """DDPG: random warm-up, noisy deterministic actions, replayed critic and policy updates."""

    name = "ddpg"
    Config = DDPGConfig

    def __init__(self, config: DDPGConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id)
        action_space = check_action_space(config.env_id, self.name, spec.action_space, (Box,))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        obs_dim = int(np.prod(obs_shape))
        self.env = msrl.envs.make(config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults)
        self.actor = DDPGActor(obs_dim, action_space, config, run)
        self.final_obs = keeps_final_obs(self.env, config.bootstrap_time_limits)  # a constant of the graph
        self.buffer = ReplayBuffer(
            config.buffer_size,
            obs_shape,
            *action_layout(action_space),
            batch_size=config.batch_size,
            num_batches=config.gradient_steps,
            learning_starts=config.learning_starts,
            seed=run.seed_for("replay"),
            device=run.device,
            final_obs=self.final_obs,
        )
        self.learner = DDPGLearner(obs_dim, action_space, config, run)

    def train_step(self) -> dict:
        # Collect: train_frequency steps of every environment, each into the replay buffer.
        obs = self.env.observe()
        for _ in steps(self.config.train_frequency):
            action = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            last = self.env.final_obs() if self.final_obs else next_obs  # the episodes' last observations
            self.buffer.insert(obs, action, reward, last, terminated, truncated)
            obs = next_obs
        # Replay: gradient_steps batches sampled uniformly (none during the warm-up).
        batch = self.buffer.sample()
        # Update: critics every step, policy and targets every policy_frequency steps.
        metrics = self.learner.learn(batch)
        # Sync: the actor acts with the new policy from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics


class TD3(DDPG):
    """TD3: DDPG with twin critics, a smoothed target action and delayed policy updates."""

    name = "td3"
    Config = TD3Config
