"""IMPALA (Espeholt et al., 2018): actor-critic with V-trace off-policy correction.

Actors collect rollouts with the policy they hold, which under ``async_single_learner`` lags
the learner's by up to one update.  The learner recomputes the log-probabilities and values of
every trajectory with its current network and corrects the targets with V-trace (truncated
importance weights ``rho_bar``, ``c_bar``), so the lag biases nothing; the mean and clipped
fraction of the importance ratios it reports measure how far behind the actors were.

With ``value_norm`` the critic learns the V-trace targets standardised by running statistics
(``msrl.rl.ValueNorm``, as MAPPO's critics do), each minibatch's targets folded in before its
value loss, and its outputs are mapped back before they enter V-trace.

Config, learner, algorithm; the actor, network and buffer come from ``msrl.rl``.
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
    split,
    steps,
)
from msrl.rl import (
    ActorCritic,
    ActorCriticActor,
    ActorCriticNet,
    GradientStep,
    RolloutBuffer,
    TrajectoryBatch,
    ValueNorm,
    action_layout,
    actor_critic,
    check_action_space,
    check_compile_option,
    check_network,
    clipped_surrogate,
    copy_weights,
    linear_lr,
    load_state,
    observation_dtype,
    observation_shape,
    ppo_epochs,
    region_key,
    save_state,
    vtrace,
)


@dataclass
class IMPALAConfig:
    env_id: str = "CartPole-v1"
    """Environment id from msrl.envs (Discrete or Box actions)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment (``ALE/Pong-v5``: ``episodic_life``, ``noop_max``...)."""
    num_envs: int = split(32)
    """Environments stepped together in the whole run (a per-run quantity)."""
    num_steps: int = 20
    """Steps per environment per rollout (the unroll length)."""
    learning_rate: float = 1e-3
    """Optimiser step size."""
    optimizer: str = "adam"
    """``adam`` (eps 1e-5) or ``rmsprop`` (the paper's: decay 0.99, eps 0.01, no momentum)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    rho_bar: float = 1.0
    """Truncation of the importance weights in the V-trace targets and policy gradient."""
    c_bar: float = 1.0
    """Truncation of the trace-cutting coefficients."""
    update_epochs: int = 1
    """Passes over each batch of trajectories (V-trace is recomputed each pass)."""
    num_minibatches: int = 1
    """Minibatches of whole trajectories per pass."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 40.0
    """Global gradient-norm clip (the paper's 40)."""
    loss_sum: bool = False
    """Sum the loss over a minibatch's steps instead of averaging it, as the paper's code does.
    Its RMSProp epsilon (0.01) and gradient clip (40) are sized for summed gradients: on the mean
    of 640 steps the epsilon outweighs RMSProp's gradient scale and the policy barely moves."""
    clip_coef: float | None = None
    """None: the paper's V-trace policy gradient.  A number: APPO's (RLlib's asynchronous PPO)
    clipped surrogate on the V-trace advantages, the ratio to the behaviour policy clipped to
    ``[1 - clip_coef, 1 + clip_coef]``, a trust region against the policy lag."""
    network: str = "mlp"
    """The network: ``mlp``, ``nature_cnn``, ``impala_cnn`` (the paper's deep torso) or
    ``module:Class`` (``msrl.rl.actor_critic``)."""
    hidden_size: int = 64
    """Width of the two hidden layers of the policy and value networks (``network: mlp``)."""
    value_norm: bool = False
    """Learn standardised value targets (``msrl.rl.ValueNorm``).  The loss then folds each
    minibatch's targets into the statistics, so the learner's step runs eagerly: ``compile`` must
    be ``auto`` (the actor's ``act`` still compiled) or ``false``."""
    compile: bool | str = "auto"
    """Each minibatch's gradient step (loss, gradient, clip, Adam) and the actor's ``act`` as
    compiled regions: ``auto`` switches to them once built, ``true`` waits for them, ``false``: eager."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma")
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_envs % self.num_minibatches:
            raise ConfigError(f"algo.num_minibatches ({self.num_minibatches}) must divide num_envs ({self.num_envs})")
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        if self.optimizer not in ("adam", "rmsprop"):
            raise ConfigError(f"algo.optimizer must be one of: adam, rmsprop; got {self.optimizer!r}")
        if self.clip_coef is not None and not 0 < self.clip_coef < 1:
            raise ConfigError(f"algo.clip_coef must be in (0, 1) or null, got {self.clip_coef}")
        check_compile_option(self.compile)
        check_network(self.network, self.env_id, None)
        if self.value_norm and self.compile in (True, "true"):
            raise ConfigError("algo.value_norm runs the learner eagerly: set algo.compile to auto or false")


# -- learner -----------------------------------------------------------------------------------------
METRICS = ("policy_loss", "value_loss", "entropy", "rho_mean", "rho_clipped")
"""The terms of ``IMPALALearner.losses`` that ``learn`` reports, averaged over its minibatches."""


class IMPALALearner(Learner):
    """V-trace actor-critic update on whole trajectories."""

    def __init__(
        self, obs_dim: int, action_space: Space, config: IMPALAConfig, run: RunInfo, obs_space: Space | None = None
    ) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.net = network(obs_dim, action_space, config, run.seed_for("weights"), obs_space).to(self.device)
        params = list(self.net.parameters())
        self.optimizer: torch.optim.Optimizer
        if config.optimizer == "rmsprop":
            self.optimizer = torch.optim.RMSprop(params, lr=config.learning_rate, alpha=0.99, eps=0.01)
        else:
            self.optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=1e-5, fused=True)
        self.generator = run.rng("learner")  # minibatch order, drawn where the data is
        self.num_updates = run.num_updates(config.num_envs * config.num_steps)
        self.updates = 0
        self.value_norm = ValueNorm().to(self.device) if config.value_norm else None
        option = "false" if config.value_norm else config.compile  # the loss updates the statistics
        self.gradient_step = GradientStep(
            self.net, self.optimizer, self.loss, config.max_grad_norm, option, key=region_key(config)
        )

    def learn(self, batch: TrajectoryBatch) -> Global:
        cfg = self.config
        batch = TrajectoryBatch(*(t.to(self.device) for t in batch))
        if batch.obs.shape[0] % cfg.num_minibatches:  # this learner's trajectories, under every policy
            raise ConfigError(
                f"algo.num_minibatches ({cfg.num_minibatches}) must divide the trajectories each "
                f"learner receives ({batch.obs.shape[0]})"
            )
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = linear_lr(cfg.learning_rate, self.updates, self.num_updates)
        self.updates += 1
        # The minibatches' terms add up on the device, in float64 (a Python float's precision), and reach the host once.
        sums = torch.zeros(len(METRICS), dtype=torch.float64, device=self.device)
        for part in ppo_epochs(batch, cfg.update_epochs, cfg.num_minibatches, self.generator):
            sums = sums + self.gradient_step(*part, sync=self.gradient_sync).double()
        passes = cfg.update_epochs * cfg.num_minibatches
        metrics = {key: value / passes for key, value in zip(METRICS, sums.tolist())}
        metrics["learning_rate"] = self.optimizer.param_groups[0]["lr"]
        return metrics

    def loss(self, *part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss to minimise on a minibatch of trajectories, and its ``METRICS`` terms (detached)."""
        cfg, batch = self.config, TrajectoryBatch(*part)
        losses = self.losses(batch)
        loss = losses["policy_loss"] + cfg.vf_coef * losses["value_loss"] - cfg.ent_coef * losses["entropy"]
        if cfg.loss_sum:  # every term is a mean over the minibatch's steps
            loss = loss * batch.rewards.numel()
        return loss, torch.stack([losses[key].detach() for key in METRICS])

    def losses(self, part: TrajectoryBatch) -> dict[str, torch.Tensor]:
        """V-trace policy-gradient, value and entropy terms of a minibatch of trajectories."""
        cfg = self.config
        envs, steps_ = part.rewards.shape
        dist, outputs = self.net(part.obs.reshape((envs * steps_,) + part.obs.shape[2:]))
        logprobs = self.net.head.log_prob(dist, part.actions.reshape((envs * steps_,) + part.actions.shape[2:]))
        norm = self.value_norm
        with torch.no_grad():
            last_value = self.net.value(part.last_obs)
            last_value = last_value if norm is None else norm.denormalize(last_value)
        time_major = lambda x: x.reshape(envs, steps_).t()  # noqa: E731
        outputs_t, logprobs_t = time_major(outputs), time_major(logprobs)
        values_t = outputs_t.detach() if norm is None else norm.denormalize(outputs_t.detach())
        vs, advantages = vtrace(
            time_major(part.logprobs),
            logprobs_t.detach(),
            time_major(part.rewards),
            values_t,
            time_major(part.terminated),
            time_major(part.truncated),
            last_value,
            cfg.gamma,
            cfg.rho_bar,
            cfg.c_bar,
        )
        if norm is not None:  # fold in this minibatch's targets (averaged over learner copies), then standardise
            sums = norm.batch_sums(vs)
            self.sync_mean([sums])
            norm.update_from_sums(sums)
            vs = norm.normalize(vs)
        ratios = (logprobs_t.detach() - time_major(part.logprobs)).exp()
        if cfg.clip_coef is None:
            policy_loss = -(logprobs_t * advantages).mean()
        else:  # V-trace's advantages carry rho = min(rho_bar, ratio): the surrogate applies the ratio itself
            unweighted = advantages / ratios.clamp(max=cfg.rho_bar)
            policy_loss = clipped_surrogate(logprobs_t, time_major(part.logprobs), unweighted, cfg.clip_coef)
        return {
            "policy_loss": policy_loss,
            "value_loss": 0.5 * (vs - outputs_t).square().mean(),
            "entropy": self.net.head.entropy(dist).mean(),
            "rho_mean": ratios.mean(),
            "rho_clipped": (ratios > cfg.rho_bar).float().mean(),
        }

    def get_weights(self) -> Global:
        return copy_weights(self.net)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, *self.state_names())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, *self.state_names())

    def state_names(self) -> tuple[str, ...]:
        return ("net", "optimizer", "generator", "updates") + (("value_norm",) if self.value_norm is not None else ())


def network(
    obs_dim: int, action_space: Space, config: IMPALAConfig, seed: int, obs_space: Space | None = None
) -> ActorCriticNet:
    """The actor-critic of ``config`` (the learner's, and the actors' copies: same seed, same weights)."""
    mlp = lambda: ActorCritic(obs_dim, action_space, config.hidden_size, seed)  # noqa: E731
    return actor_critic(config.network, obs_space, action_space, seed, mlp)


# -- algorithm ---------------------------------------------------------------------------------------
class IMPALA(Algorithm):
    """IMPALA: rollouts with the actors' (possibly stale) policy, V-trace-corrected learning."""

    name = "impala"
    Config = IMPALAConfig

    def __init__(self, config: IMPALAConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        action_space = check_action_space(config.env_id, "impala", spec.action_space, (Discrete, Box))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        check_network(config.network, config.env_id, spec.observation_space)
        obs_dim = int(np.prod(obs_shape))
        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        self.actor = ActorCriticActor(
            network(obs_dim, action_space, config, run.seed_for("weights"), spec.observation_space),
            run.seed_for("actor"),
            run.device,
            compile=config.compile,
            key=region_key(config),
        )
        self.buffer = RolloutBuffer(
            config.num_steps,
            config.num_envs,
            obs_shape,
            *action_layout(action_space),
            device=run.device,
            obs_dtype=observation_dtype(spec.observation_space),
        )
        self.learner = IMPALALearner(obs_dim, action_space, config, run, spec.observation_space)

    def train_step(self) -> dict:
        # Rollout: step every environment num_steps times with the policy the actor holds.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            action, logprob, value = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            self.buffer.insert(obs, action, logprob, value, reward, terminated, truncated)
            obs = next_obs
        # Trajectories: as collected, with the behaviour policy's log-probabilities.
        batch = self.buffer.drain_trajectories(obs)
        # Update: V-trace targets from the learner's current network.
        metrics = self.learner.learn(batch)
        # Sync: the actors act with the new weights when they next receive them.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
