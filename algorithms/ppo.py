"""Proximal Policy Optimization (Schulman et al., 2017), for discrete and continuous actions.

Read top to bottom: config, learner (the actor, network and buffer come from ``msrl.rl``), then
the algorithm whose ``train_step`` only orchestrates component calls.  Written against msrl's
public API alone, so every distribution policy runs it as is.

Discrete actions sample from a categorical policy; ``Box`` actions from a diagonal Gaussian with a
state-independent log standard deviation, the environment clipping them to its bounds (as CleanRL's
``ppo_continuous_action`` does).  Observation and reward normalisation (SB3's ``VecNormalize``):
the learner keeps the observation statistics, folds in each batch (averaged over learner copies,
so every policy normalises alike) and sends them to the actors with the weights; the buffer
scales rewards.  Checkpoints hold both.
The networks are the PPO paper's (tanh, orthogonal initialisation) unless ``activation: relu`` and
``ortho_init: false`` ask for SB3's form, as ``configs/ppo_halfcheetah.yaml`` does with rl-zoo's
settings.

The learner is plain torch modules, a loss and Adam; ``msrl.rl.GradientStep`` runs each minibatch
step eagerly or, once built, as one compiled region of the same code (``algo.compile``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import msrl.envs
from msrl.core import (
    Algorithm,
    Box,
    ConfigError,
    Discrete,
    Global,
    Learner,
    RunInfo,
    Space,
    check_unit_interval,
    deferred,
    split,
    steps,
)
from msrl.rl import (
    OBS_STATS,
    ActorCritic,
    ActorCriticActor,
    ActorCriticNet,
    CompiledCall,
    GradientStep,
    RolloutBatch,
    RolloutBuffer,
    RunningMeanStd,
    action_layout,
    actor_critic,
    check_action_space,
    check_activation,
    check_compile_option,
    check_network,
    clipped_surrogate,
    copy_weights,
    linear_lr,
    load_generator_state,
    normalize_advantages,
    obs_stats_weights,
    observation_dtype,
    observation_shape,
    ppo_epochs,
    region_key,
)


@dataclass
class PPOConfig:
    env_id: str = "CartPole-v1"
    """Environment id from msrl.envs (Discrete or Box actions)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment (``ALE/Pong-v5``: ``episodic_life``, ``noop_max``...)."""
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
    network: str = "mlp"
    """The network: ``mlp`` (separate policy and value MLPs), ``nature_cnn`` or ``impala_cnn`` (one
    convolutional torso under both heads, for frames), or a torso of your own as ``module:Class``
    (``msrl.rl.actor_critic``)."""
    hidden_size: int = 64
    """Width of the two hidden layers of the policy and value networks (``network: mlp``)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""
    activation: str = "tanh"
    """Hidden-layer activation of both networks: tanh (the PPO paper's, CleanRL's) or relu."""
    ortho_init: bool = True
    """Orthogonal initialisation as in the PPO paper's code; false keeps PyTorch's default (SB3's
    ``ortho_init=False``, which rl-zoo's MuJoCo entries use)."""
    normalize_obs: bool = False
    """Standardise observations by their running mean and variance: the learner folds in every
    batch after learning from it and sends the statistics to the actors with the weights."""
    normalize_reward: bool = False
    """Divide rewards by the running std of the discounted return (kept by the buffer)."""
    compile: bool | str = "auto"
    """Each minibatch step, and the actor's ``act``, as one compiled region (built ahead of time on
    the CPU, a CUDA graph on CUDA): ``auto`` starts eagerly and switches once built (in the
    background, or at once from the cache); ``true`` waits for the build; ``false``: eager."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    def validate(self) -> None:
        check_unit_interval(self, "gamma", "gae_lambda")
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size % self.num_minibatches:
            raise ConfigError(
                f"algo.num_minibatches ({self.num_minibatches}) must divide num_envs*num_steps ({self.batch_size})"
            )
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        check_compile_option(self.compile)
        check_activation(self.activation)
        check_network(self.network, self.env_id, None)
        if self.normalize_obs and self.network != "mlp":
            raise ConfigError(f"algo.normalize_obs is for vector observations (network: mlp), not {self.network}")


# -- learner -----------------------------------------------------------------------------------------
class PPOLearner(Learner):
    """Clipped-surrogate PPO update over minibatch epochs, with plain autograd."""

    def __init__(
        self,
        obs_dim: int,
        action_space: Space,
        config: PPOConfig,
        run: RunInfo,
        obs_shape: tuple[int, ...] | None = None,
        obs_space: Space | None = None,
    ) -> None:
        if config.batch_size % config.num_minibatches:  # this learner's share of the batch, under every policy
            raise ConfigError(
                f"algo.num_minibatches ({config.num_minibatches}) must divide the batch each learner "
                f"learns from ({config.batch_size} = its num_envs x num_steps)"
            )
        self.config = config
        self.device = torch.device(run.device)
        self.net = network(obs_dim, action_space, config, run.seed_for("weights"), obs_space).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.learning_rate, eps=1e-5, fused=True)
        # the config fixes every constant the loss reads: the compiled regions are named by it (no trace to find them)
        self.gradient_step = GradientStep(
            self.net, self.optimizer, self.loss, config.max_grad_norm, config.compile, key=region_key(config)
        )
        terms = lambda net, *data: self.diagnostic_terms(*data)  # noqa: E731 - reads self.net, which the call swaps
        self.diagnose = CompiledCall(self.net, terms, config.compile, name="learner", key=region_key(config))
        self.generator = run.rng("learner")  # minibatch order, drawn where the data is
        self.num_updates = run.num_updates(config.batch_size)
        self.updates = 0
        self.obs_stats = RunningMeanStd(obs_shape or (obs_dim,), device=self.device) if config.normalize_obs else None

    def learn(self, batch: RolloutBatch) -> Global:
        cfg = self.config
        data = RolloutBatch(*(t.to(self.device) for t in batch))
        raw_obs = data.obs
        if self.obs_stats is not None:  # the statistics the actors normalised this batch with
            data = data._replace(obs=self.obs_stats.normalize(raw_obs))
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = linear_lr(cfg.learning_rate, self.updates, self.num_updates)
        self.updates += 1
        self.update(data)
        if self.obs_stats is not None:  # fold in the batch's moments, averaged over learner copies
            sums = self.obs_stats.batch_sums(raw_obs)
            self.sync_mean([sums])
            self.obs_stats.update_from_sums(sums)
        # Computed once the new weights are on their way to the actors: nothing waits for them.
        return deferred(self.diagnostics, *data)

    def update(self, data: RolloutBatch) -> None:
        """PPO's epochs of minibatch gradient steps."""
        cfg = self.config
        for minibatch in ppo_epochs(data, cfg.update_epochs, cfg.num_minibatches, self.generator):
            self.gradient_step(*minibatch, sync=self.gradient_sync)

    def loss(self, *minibatch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The minibatch loss minimised, and itself detached (the compiled step's metrics)."""
        pg_loss, v_loss, entropy, _ = self.losses(*minibatch)
        loss = pg_loss + self.config.vf_coef * v_loss
        if self.config.ent_coef:
            loss = loss - self.config.ent_coef * entropy.mean()
        return loss, loss.detach().reshape(1)

    def losses(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        old_logprobs: torch.Tensor,
        old_values: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """Clipped surrogate loss, value loss, entropy and new log-probabilities of a minibatch."""
        cfg = self.config
        dist, values = self.net(obs)
        logprobs = self.net.head.log_prob(dist, actions)
        if cfg.norm_adv:
            advantages = normalize_advantages(advantages)
        pg_loss = clipped_surrogate(logprobs, old_logprobs, advantages, cfg.clip_coef)
        v_loss = (values - returns).square()
        if cfg.clip_vloss:
            clipped = old_values + (values - old_values).clamp(-cfg.clip_coef, cfg.clip_coef)
            v_loss = torch.max(v_loss, (clipped - returns).square())
        return pg_loss, 0.5 * v_loss.mean(), self.net.head.entropy(dist), logprobs

    @torch.no_grad()
    def diagnostics(self, *data: torch.Tensor) -> dict[str, float]:
        """Losses, entropy, KL and clip fraction of the updated policy on the whole batch, once per
        update: computing them per minibatch would cost a fifth of the update's time."""
        values = self.diagnose(*data).tolist()
        metrics = dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"), values))
        metrics["learning_rate"] = float(self.optimizer.param_groups[0]["lr"])
        return metrics

    def diagnostic_terms(self, *data: torch.Tensor) -> torch.Tensor:
        """``diagnostics``' numbers as one tensor (a compiled call of its own, like the step)."""
        pg_loss, v_loss, entropy, logprobs = self.losses(*data)
        log_ratio = logprobs - data[2]
        ratio = log_ratio.exp()
        clipfrac = ((ratio - 1.0).abs() > self.config.clip_coef).float().mean()
        return torch.stack([pg_loss, v_loss, entropy.mean(), ((ratio - 1) - log_ratio).mean(), clipfrac])

    def get_weights(self) -> Global:
        weights: dict[str, Any] = copy_weights(self.net)
        if self.obs_stats is not None:  # flat entries beside the weights: nothing nested crosses to the actors
            weights.update(obs_stats_weights(self.obs_stats))
        return weights

    def state_dict(self) -> dict[str, Any]:
        state = {
            "net": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "updates": self.updates,
        }
        if self.obs_stats is not None:
            state[OBS_STATS] = self.obs_stats.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        load_generator_state(self.generator, state["generator"])
        self.updates = int(state["updates"])
        if self.obs_stats is not None:
            self.obs_stats.load_state_dict(state[OBS_STATS])


def network(
    obs_dim: int, action_space: Space, config: PPOConfig, seed: int, obs_space: Space | None = None
) -> ActorCriticNet:
    """The actor-critic of ``config`` (the learner's, and the actors' copies: same seed, same
    weights); a convolutional one needs the observation space."""
    size, log_std = config.hidden_size, config.log_std_init
    mlp = lambda: ActorCritic(obs_dim, action_space, size, seed, log_std, None, config.activation, config.ortho_init)  # noqa: E731
    return actor_critic(config.network, obs_space, action_space, seed, mlp)


# -- algorithm ---------------------------------------------------------------------------------------
class PPO(Algorithm):
    """PPO with GAE, clipped surrogate and value losses, entropy bonus, minibatch epochs, advantage
    normalisation, gradient clipping, and optional observation and reward normalisation."""

    name = "ppo"
    Config = PPOConfig

    def __init__(self, config: PPOConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        action_space = check_action_space(config.env_id, "ppo", spec.action_space, (Discrete, Box))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        check_network(config.network, config.env_id, spec.observation_space)
        obs_dim = int(np.prod(obs_shape))
        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        net = network(obs_dim, action_space, config, run.seed_for("weights"), spec.observation_space)
        self.actor = ActorCriticActor(
            net, run.seed_for("actor"), run.device, config.normalize_obs, obs_shape, config.compile, region_key(config)
        )
        self.buffer = RolloutBuffer(
            config.num_steps,
            config.num_envs,
            obs_shape,
            *action_layout(action_space),
            gamma=config.gamma,
            gae_lambda=config.gae_lambda,
            device=run.device,
            normalize_reward=config.normalize_reward,
            obs_dtype=observation_dtype(spec.observation_space),
        )
        self.learner = PPOLearner(obs_dim, action_space, config, run, obs_shape, spec.observation_space)

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
