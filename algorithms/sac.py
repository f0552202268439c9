"""Soft Actor-Critic (Haarnoja et al., 2018) for continuous actions: twin Q-networks with clipped
double-Q targets, a tanh-squashed Gaussian policy, automatic entropy tuning towards a target
entropy of ``-dim(A)`` (in the policy's (-1, 1) action units, as SB3 and the authors' code),
and Polyak-averaged target critics.

The loop is DQN's: every iteration steps the environments ``train_frequency`` times (uniformly
random actions until ``learning_starts`` transitions are in, then the policy's samples) into a
replay buffer, and the learner takes ``gradient_steps`` steps on sampled batches.  Read top to
bottom: config, networks and the temperature, components, algorithm.
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
    GaussianHead,
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
    sample_tanh_gaussian,
    save_state,
)

LOG_STD_HEADS = {"tanh": (-5.0, 2.0), "clamp": (-20.0, 2.0)}
"""The log-std heads ``algo.log_std_head`` chooses from, and their bounds: ``tanh`` squashes the
layer's output smoothly into [-5, 2] (CleanRL's ``sac_continuous_action.py``; it starts near
log-std -1.5, a standard deviation of about 0.22), ``clamp`` clips it to [-20, 2] (SB3's and the
authors' softlearning; it starts near 0, a standard deviation of about 1)."""


@dataclass
class SACConfig:
    env_id: str = "Pendulum-v1"
    """Environment id from msrl.envs (Box actions)."""
    num_envs: int = split(1)
    """Environments stepped together in the whole run (a per-run quantity)."""
    train_frequency: int = 1
    """Steps per environment between updates (an iteration)."""
    gradient_steps: int = 1
    """Gradient steps per update."""
    batch_size: int = split(256)
    """Transitions per gradient step, over the whole run (each buffer copy samples its share)."""
    buffer_size: int = split(1_000_000)
    """Replay capacity in transitions, over the whole run."""
    learning_starts: int = split(100)
    """Transitions collected with uniformly random actions before the first update (per run)."""
    policy_lr: float = 1e-3
    """Adam step size of the policy (and of the entropy temperature)."""
    q_lr: float = 1e-3
    """Adam step size of the Q-networks."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target Q-networks."""
    policy_frequency: int = 1
    """Q-network steps per policy step (TD3-style delayed policy updates above 1)."""
    autotune: bool = True
    """Tune the entropy temperature alpha towards a target entropy of -dim(A)."""
    alpha: float = 1.0
    """The temperature (its initial value when autotuned)."""
    max_grad_norm: float = 0.0
    """Global gradient-norm clip of each network (0 = none, as in the paper)."""
    hidden_sizes: tuple = (256, 256)
    """Widths of the hidden layers (ReLU) of the policy and Q-networks."""
    log_std_head: str = "tanh"
    """The policy's log-std output: ``tanh`` squashes it into [-5, 2] (CleanRL), ``clamp`` clips it
    to [-20, 2] (SB3 and the SAC authors' code; it starts near a standard deviation of 1, not 0.22)."""
    bootstrap_time_limits: bool = False
    """Store a transition cut by the time limit with its episode's last observation (the
    environment's ``final_obs()``), bootstrapped, as SB3's replay does; false drops it."""
    compile: bool | str = "auto"
    """The critics', the policy's and the temperature's gradient steps and the actor's draw, each
    as a compiled region: ``auto`` switches to them once built, ``true`` waits for them, ``false``: eager."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma")
        for name in ("num_envs", "train_frequency", "gradient_steps", "batch_size", "buffer_size", "policy_frequency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("policy_lr", "q_lr", "alpha"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"algo.{name} must be > 0, got {getattr(self, name)}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"algo.tau must be in (0, 1], got {self.tau}")
        if self.log_std_head not in LOG_STD_HEADS:
            choices = ", ".join(LOG_STD_HEADS)
            raise ConfigError(f"unknown algo.log_std_head {self.log_std_head!r}; valid choices: {choices}")
        check_compile_option(self.compile)


# -- networks ------------------------------------------------------------------------------------
class SquashedGaussianPolicy(nn.Module):
    """Observation -> tanh-squashed Gaussian over actions, rescaled to the action bounds."""

    scale: torch.Tensor  # buffers (registered in __init__): half the action range, and its centre
    bias: torch.Tensor

    def __init__(
        self, obs_dim: int, action_space: Box, hidden: tuple, generator: torch.Generator, log_std_head: str = "tanh"
    ) -> None:
        super().__init__()
        dim = int(np.prod(action_space.shape))
        self.squash = log_std_head == "tanh"
        self.log_std_min, self.log_std_max = LOG_STD_HEADS[log_std_head]
        self.torso = mlp([obs_dim, *hidden], nn.ReLU, generator)
        self.torso.append(nn.ReLU())
        self.mean = mlp([hidden[-1], dim], generator=generator)
        self.log_std = mlp([hidden[-1], dim], generator=generator)
        low = np.broadcast_to(np.asarray(action_space.low, dtype=np.float32), (dim,))
        high = np.broadcast_to(np.asarray(action_space.high, dtype=np.float32), (dim,))
        self.register_buffer("scale", torch.as_tensor((high - low) / 2.0))
        self.register_buffer("bias", torch.as_tensor((high + low) / 2.0))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(obs)
        log_std = self.log_std(features)
        if not self.squash:
            return self.mean(features), log_std.clamp(self.log_std_min, self.log_std_max)
        span = self.log_std_max - self.log_std_min
        return self.mean(features), self.log_std_min + 0.5 * span * (torch.tanh(log_std) + 1)

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in the env's bounds, and its log density in the policy's own
        (-1, 1) units, before the rescaling to the bounds (``noise``: drawn unless given).

        The density is the squashed Gaussian's, as the SAC authors' softlearning and SB3 compute it
        (both act in a [-1, 1] action space and rescale outside the policy): the target entropy
        -dim(A) then means the same for every env, whatever its action units.  (Taken in the env's
        units, as CleanRL does, it would lie ``sum(log(scale))`` lower: -1.69 rather than -1 per
        dimension on Pendulum's [-2, 2].)  Besides a constant in the soft Q-values, the offset
        moves only the temperature's target."""
        mean, log_std = self(obs)
        squashed, logprob = sample_tanh_gaussian(mean, log_std, generator, noise)
        return squashed * self.scale + self.bias, logprob

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0]) * self.scale + self.bias


class Temperature(nn.Module):
    """The entropy temperature, ``log_alpha``, as a module's one parameter: its Adam step then
    compiles as the networks' do (``msrl.rl.GradientStep``), and checkpoints hold it as the
    tensor they always held."""

    def __init__(self, alpha: float, autotune: bool) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(np.log(alpha))), requires_grad=autotune)


def policy_loss(
    policy: SquashedGaussianPolicy, critic: nn.Module, obs: Tensor, noise: Tensor, alpha: Tensor
) -> tuple[Tensor, Tensor]:
    """The reparameterised policy loss against the smaller of ``critic``'s two values, and it and
    the sampled actions' mean log density (detached) to report."""
    sampled, logprobs = policy.sample(obs, None, noise)
    loss = (alpha * logprobs - torch.min(*critic(obs, sampled))).mean()
    return loss, torch.stack([loss.detach(), logprobs.detach().mean()])


def temperature_loss(temperature: Temperature, logprob: Tensor, target_entropy: float) -> tuple[Tensor, Tensor]:
    """The temperature's loss, pushing the policy's entropy (-``logprob``, the mean log density)
    towards ``target_entropy``, and it (detached) to report."""
    loss = -(temperature.log_alpha * (logprob.detach() + target_entropy)).mean()
    return loss, loss.detach().unsqueeze(0)


# -- components ------------------------------------------------------------------------------------
class SACActor(Actor):
    """Uniformly random actions for the first ``learning_starts`` transitions, then policy samples."""

    def __init__(self, obs_dim: int, action_space: Box, config: SACConfig, run: RunInfo) -> None:
        self.device = torch.device(run.device)
        weights = torch.Generator().manual_seed(run.seed_for("weights"))
        self.policy = SquashedGaussianPolicy(
            obs_dim, action_space, config.hidden_sizes, weights, config.log_std_head
        ).to(self.device)  # as the learner's
        self.generator = run.rng("actor")  # action draws: this copy's own, so copies explore independently
        self.learning_starts = config.learning_starts
        self.env_steps = 0
        draw = lambda policy, obs, noise: policy.sample(obs, None, noise)[0]  # noqa: E731
        self.draw = CompiledCall(self.policy, draw, config.compile, key=region_key(config))  # its noise drawn outside

    def _obs(self, obs: Any) -> torch.Tensor:
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device)

    @torch.inference_mode()
    def act(self, obs: Any) -> Batched:
        obs = self._obs(obs)
        self.env_steps += obs.shape[0]
        if self.env_steps <= self.learning_starts:
            shape = (obs.shape[0], self.policy.scale.numel())
            uniform = torch.rand(shape, generator=self.generator, device=self.device) * 2 - 1
            return uniform * self.policy.scale + self.policy.bias
        shape = (obs.shape[0], self.policy.scale.numel())  # what sample draws: the means' shape
        return self.draw(obs, GaussianHead.noise(shape, self.generator, self.device, obs.dtype))

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return self.policy.mode(self._obs(obs))

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        load_weights(self.policy, weights)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "policy", "generator", "env_steps")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "policy", "generator", "env_steps")


class SACLearner(Learner):
    """Soft Q-learning for the twin critics, the reparameterised policy loss, and the temperature."""

    def __init__(self, obs_dim: int, action_space: Box, config: SACConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        generator = torch.Generator().manual_seed(run.seed_for("weights"))
        action_dim = int(np.prod(action_space.shape))
        policy = SquashedGaussianPolicy(obs_dim, action_space, config.hidden_sizes, generator, config.log_std_head)
        self.policy = policy.to(self.device)
        self.critic = QFunctions(obs_dim, action_dim, config.hidden_sizes, generator).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.temperature = Temperature(config.alpha, config.autotune).to(self.device)
        self.log_alpha = self.temperature.log_alpha
        self.target_entropy = -float(action_dim)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.q_lr, fused=True)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.policy_lr, fused=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.policy_lr)
        self.generator = run.rng("learner")  # the actions sampled for the targets and the policy loss
        self.gradient_steps_taken = 0
        # The modules each loss reads without differentiating: inputs of its compiled step, not constants.
        clip, option = config.max_grad_norm, config.compile
        critic_reads, policy_reads = (self.critic_target, self.policy), (self.critic,)
        key = region_key(config)  # it fixes every constant the losses read: the compiled regions are named by it
        self.critic_step = GradientStep(
            self.critic, self.critic_optimizer, self.critic_loss, clip, option, critic_reads, key=key
        )
        self.policy_step = GradientStep(
            self.policy, self.policy_optimizer, self.policy_loss, clip, option, policy_reads, key=key
        )
        self.alpha_step = GradientStep(
            self.temperature, self.alpha_optimizer, self.alpha_loss, clip, option, key=f"{key}/{self.target_entropy}"
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
            alpha = self.log_alpha.detach().exp()
            # Critics: regress both Q's on the soft clipped double-Q target (the policy's noise drawn here).
            replayed = (obs, actions, rewards, next_obs, terminated, self.noise(obs), alpha)
            q_total = q_total + self.critic_step(*replayed, sync=sync)[0].double()
            # Policy and temperature, every policy_frequency critic steps.
            if self.gradient_steps_taken % cfg.policy_frequency == 0:
                policy_loss, logprob = self.policy_step(obs, self.noise(obs), alpha, sync=sync)
                if cfg.autotune:  # from the policy step's mean log density
                    self.alpha_step(logprob, sync=sync)
                policy_total = policy_total + policy_loss.double()
                policy_steps += 1
            # Targets: Polyak averaging towards the critics.
            polyak_update_(self.critic_target, self.critic, cfg.tau)
            self.gradient_steps_taken += 1
        q_sum, policy_sum, alpha_now = torch.stack(
            [q_total, policy_total, self.log_alpha.detach().exp().double()]
        ).tolist()
        metrics = {
            "q_loss": q_sum / batch.num_batches,
            "policy_loss": policy_sum / max(1, policy_steps),
            "alpha": alpha_now,
        }
        return metrics

    def noise(self, obs: torch.Tensor) -> torch.Tensor:
        """Standard normal noise for one batch of policy samples, from the learner's generator."""
        shape = (obs.shape[0], self.policy.scale.numel())
        return GaussianHead.noise(shape, self.generator, obs.device, obs.dtype)

    def critic_loss(
        self,
        obs: Tensor,
        actions: Tensor,
        rewards: Tensor,
        next_obs: Tensor,
        terminated: Tensor,
        noise: Tensor,
        alpha: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """Both Q's squared error against the soft clipped double-Q target, and it (detached) to report."""
        with torch.no_grad():
            next_actions, next_logprobs = self.policy.sample(next_obs, None, noise)
            next_q = torch.min(*self.critic_target(next_obs, next_actions)) - alpha * next_logprobs
            target = rewards + self.config.gamma * (1.0 - terminated) * next_q
        q1, q2 = self.critic(obs, actions)
        q_loss = nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)
        return q_loss, q_loss.detach().unsqueeze(0)

    def policy_loss(self, obs: Tensor, noise: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        return policy_loss(self.policy, self.critic, obs, noise, alpha)

    def alpha_loss(self, logprob: Tensor) -> tuple[Tensor, Tensor]:
        """``temperature_loss`` through ``self.temperature``, the module its compiled step swaps
        the parameter of."""
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
class SAC(Algorithm):
    """SAC: random warm-up, replayed soft Q-learning, reparameterised policy, tuned temperature."""

    name = "sac"
    Config = SACConfig

    def __init__(self, config: SACConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id)
        action_space = check_action_space(config.env_id, "sac", spec.action_space, (Box,))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        obs_dim = int(np.prod(obs_shape))
        self.env = msrl.envs.make(config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults)
        self.actor = SACActor(obs_dim, action_space, config, run)
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
        self.learner = SACLearner(obs_dim, action_space, config, run)

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
        # Update: critics, policy and temperature.
        metrics = self.learner.learn(batch)
        # Sync: the actor acts with the new policy from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
