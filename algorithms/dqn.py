"""Deep Q-Network (Mnih et al., 2015), with the double-DQN target (van Hasselt et al., 2016) as an option.

The off-policy loop: every iteration steps the environments ``train_frequency`` times with an
epsilon-greedy actor, inserting every transition into a replay buffer; then the learner takes
``gradient_steps`` steps on batches the buffer samples (none until ``learning_starts`` transitions
are in: the warm-up), and the actor receives the new weights.  The epsilon schedule is the
actor's state, so it resumes exactly from a checkpoint.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

import msrl.envs
from msrl.core import (
    Actor,
    Algorithm,
    Batched,
    ConfigError,
    Discrete,
    Global,
    Learner,
    NoValue,
    RunInfo,
    Space,
    check_unit_interval,
    split,
    steps,
)
from msrl.rl import (
    CategoricalQ,
    CompiledCall,
    FrameReplayBuffer,
    GradientStep,
    PrioritizedBatch,
    PrioritizedFrameReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBatch,
    ReplayBuffer,
    as_observation,
    categorical_projection,
    check_action_space,
    check_compile_option,
    check_network,
    copy_weights,
    keeps_final_obs,
    load_state,
    load_weights,
    mlp,
    observation_dtype,
    observation_shape,
    polyak_update_,
    region_key,
    save_state,
)
from msrl.rl import q_network as torso_q_network

LOSSES = {"huber": nn.functional.smooth_l1_loss, "mse": nn.functional.mse_loss}
"""The TD losses ``algo.loss`` chooses from (each transition's, weighted: ``reduction="none"``)."""


@dataclass
class DQNConfig:
    env_id: str = "CartPole-v1"
    """Environment id from msrl.envs (Discrete actions)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment (``ALE/Pong-v5``: ``episodic_life``, ``noop_max``...)."""
    num_envs: int = split(8)
    """Environments stepped together in the whole run (a per-run quantity)."""
    train_frequency: int = 32
    """Steps per environment between updates (an iteration)."""
    gradient_steps: int = 128
    """Gradient steps per update."""
    batch_size: int = split(64)
    """Transitions per gradient step, over the whole run (each buffer copy samples its share)."""
    buffer_size: int = split(100_000)
    """Replay capacity in transitions, over the whole run."""
    learning_starts: int = split(1_000)
    """Transitions to collect before the first update (per run)."""
    learning_rate: float = 2.3e-3
    """Adam step size."""
    gamma: float = 0.99
    """Discount factor."""
    target_update_interval: int = 128
    """Gradient steps between target-network updates.  CleanRL and SB3 count this interval in env
    steps instead; at ``gradient_steps`` steps every ``train_frequency`` steps of ``num_envs``
    environments, their N env steps are ``N * gradient_steps / (train_frequency * num_envs)``
    gradient steps here (CleanRL's 500 at one step every 10 env steps of 1 env: 50)."""
    tau: float = 1.0
    """Target update rate (1 copies the online network; below 1 is Polyak averaging)."""
    exploration_fraction: float = 0.16
    """Fraction of the run over which epsilon decays linearly."""
    start_epsilon: float = 1.0
    """Epsilon at the start."""
    end_epsilon: float = 0.04
    """Epsilon after the decay."""
    double_dqn: bool = False
    """Pick the next action with the online network and value it with the target network."""
    n_step: int = 1
    """Multi-step targets: the rewards of ``n_step`` steps, then the target network's value
    discounted by ``gamma ** n_step`` (``msrl.rl.NStepReturns``; Rainbow's 3)."""
    distributional: bool = False
    """C51 (Bellemare et al., 2017): each action's return as a distribution on ``atoms`` values from
    ``v_min`` to ``v_max`` (``msrl.rl.CategoricalQ``), regressed by cross-entropy on the projected
    target distribution; acting reads the expected return."""
    atoms: int = 51
    """The distribution's number of atoms."""
    v_min: float = -10.0
    """The smallest return the distribution holds."""
    v_max: float = 10.0
    """The largest."""
    dueling: bool = False
    """A dueling head (Wang et al., 2016): a state value and each action's advantage on one torso
    (``msrl.rl.DuelingQ``)."""
    prioritized_replay: bool = False
    """Sample transitions in proportion to their last TD error (Schaul et al.'s proportional
    prioritized replay, ``msrl.rl.PrioritizedReplayBuffer``), the learner sending the new errors
    back to the replay and weighting each loss by its importance-sampling weight."""
    priority_alpha: float = 0.6
    """How much the priorities count (0: uniform sampling)."""
    priority_beta: float = 0.4
    """The importance-sampling exponent at the start, annealed to 1 over the run."""
    priority_epsilon: float = 1e-6
    """Added to each |TD error|, so no transition's priority is 0."""
    loss: str = "huber"
    """The TD regression loss: ``huber`` (smooth L1, as SB3) or ``mse`` (squared error, as CleanRL)."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip (SB3's default); 0 clips nothing (as CleanRL)."""
    network: str = "mlp"
    """The Q-network's torso: ``mlp`` (``hidden_sizes``), ``nature_cnn`` (the DQN paper's),
    ``impala_cnn`` or ``module:Class`` (``msrl.rl.q_network``)."""
    hidden_sizes: tuple = (256, 256)
    """Widths of the Q-network's hidden layers (ReLU; ``network: mlp``)."""
    bootstrap_time_limits: bool = False
    """Store a transition cut by the time limit with its episode's last observation (the
    environment's ``final_obs()``), bootstrapped, as SB3's replay does; false drops it."""
    compile: bool | str = "auto"
    """Each TD gradient step (loss, gradient, clip, Adam) and the actor's epsilon-greedy choice as
    compiled regions: ``auto`` switches to them once built, ``true`` waits for them, ``false``: eager."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma")
        for name in (
            "num_envs",
            "train_frequency",
            "gradient_steps",
            "batch_size",
            "buffer_size",
            "target_update_interval",
            "n_step",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.priority_alpha < 0 or not 0.0 <= self.priority_beta <= 1.0 or self.priority_epsilon <= 0:
            raise ConfigError(
                "algo.priority_alpha must be >= 0, algo.priority_beta in [0, 1] and algo.priority_epsilon > 0; got "
                f"{self.priority_alpha}, {self.priority_beta}, {self.priority_epsilon}"
            )
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        if self.loss not in LOSSES:
            raise ConfigError(f"unknown algo.loss {self.loss!r}; valid choices: {', '.join(LOSSES)}")
        if self.max_grad_norm < 0:
            raise ConfigError(f"algo.max_grad_norm must be >= 0 (0: no clip), got {self.max_grad_norm}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"algo.tau must be in (0, 1], got {self.tau}")
        if not 0.0 <= self.end_epsilon <= self.start_epsilon <= 1.0:
            raise ConfigError("algo.end_epsilon and algo.start_epsilon must satisfy 0 <= end <= start <= 1")
        if self.distributional and (self.atoms < 2 or not self.v_min < self.v_max):
            raise ConfigError(
                f"algo.distributional needs algo.atoms >= 2 and algo.v_min < algo.v_max; got {self.atoms}, "
                f"{self.v_min}, {self.v_max}"
            )
        if self.dueling and self.network == "mlp" and not self.hidden_sizes:
            raise ConfigError("algo.dueling needs a hidden layer for its two heads to share: set algo.hidden_sizes")
        check_compile_option(self.compile)
        check_network(self.network, self.env_id, None)


# -- network -----------------------------------------------------------------------------------------
def q_network(
    obs_dim: int, num_actions: int, config: DQNConfig, seed: int, obs_space: Space | None = None
) -> nn.Module:
    """Observation -> one Q-value per action (the learner's, and the actors' copies: same seed, same
    weights); distributional: a ``CategoricalQ`` whose ``logits`` the learner regresses."""
    atoms = config.atoms if config.distributional else 1
    sizes = [obs_dim, *config.hidden_sizes, num_actions * atoms]
    build_mlp = lambda: mlp(sizes, nn.ReLU, torch.Generator().manual_seed(seed))  # noqa: E731

    def dueling_torso() -> tuple[nn.Module, int]:  # the hidden layers, each followed by its ReLU
        body = mlp([obs_dim, *config.hidden_sizes], nn.ReLU, torch.Generator().manual_seed(seed))
        return nn.Sequential(body, nn.ReLU()), config.hidden_sizes[-1]

    dueling = dueling_torso if config.dueling else None
    net = torso_q_network(config.network, obs_space, num_actions, seed, build_mlp, dueling, atoms)
    return CategoricalQ(net, num_actions, atoms, config.v_min, config.v_max) if config.distributional else net


# -- components ------------------------------------------------------------------------------------
def epsilon_greedy(q: nn.Module, obs: torch.Tensor, explore: torch.Tensor, random: torch.Tensor) -> torch.Tensor:
    """The random action where ``explore``, else the greedy one."""
    return torch.where(explore, random, q(obs).argmax(-1))


class DQNActor(Actor):
    """Epsilon-greedy on its copy of the Q-network; epsilon decays linearly with the env steps it took."""

    def __init__(
        self, obs_dim: int, num_actions: int, config: DQNConfig, run: RunInfo, obs_space: Space | None = None
    ) -> None:
        self.config = config
        self.device = torch.device(run.device)
        seed = run.seed_for("weights")
        self.q = q_network(obs_dim, num_actions, config, seed, obs_space).to(self.device)  # as the learner's
        self.num_actions = num_actions
        self.generator = run.rng("actor")  # exploration draws: this copy's own, so copies explore independently
        self.decay_steps = max(1, int(config.exploration_fraction * run.total_env_steps))
        self.env_steps = 0
        # the draws stay outside the compiled call
        self.choose = CompiledCall(self.q, epsilon_greedy, config.compile, key=region_key(config))

    @property
    def epsilon(self) -> float:
        cfg = self.config
        progress = min(1.0, self.env_steps / self.decay_steps)
        return cfg.start_epsilon + progress * (cfg.end_epsilon - cfg.start_epsilon)

    @torch.inference_mode()
    def act(self, obs: Any) -> Batched:
        obs = as_observation(obs, self.device)
        n = obs.shape[0]
        explore = torch.rand(n, generator=self.generator, device=self.device) < self.epsilon
        random = torch.randint(self.num_actions, (n,), generator=self.generator, device=self.device)
        self.env_steps += n
        return self.choose(obs, explore, random)

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return self.q(as_observation(obs, self.device)).argmax(-1)

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        load_weights(self.q, weights)

    def metrics(self) -> dict[str, float]:
        return {"epsilon": self.epsilon}

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "q", "generator", "env_steps")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "q", "generator", "env_steps")


class DQNLearner(Learner):
    """TD regression (Huber as SB3, or squared error as CleanRL) on replayed batches against a target network."""

    def __init__(
        self, obs_dim: int, num_actions: int, config: DQNConfig, run: RunInfo, obs_space: Space | None = None
    ) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.q = q_network(obs_dim, num_actions, config, run.seed_for("weights"), obs_space).to(self.device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=config.learning_rate, fused=True)
        # the target network, read by the loss: an input of a compiled step, never a constant of it
        self.gradient_step = GradientStep(
            self.q,
            self.optimizer,
            self.loss,
            config.max_grad_norm,
            config.compile,
            (self.q_target,),
            key=region_key(config),
        )
        self.gradient_steps_taken = 0
        self.last_td_errors = torch.zeros(0, config.gradient_steps)
        self.discount = config.gamma**config.n_step  # what bootstraps a stored (n-step) transition

    def learn(self, batch: ReplayBatch | PrioritizedBatch) -> Global:
        cfg = self.config
        self.last_td_errors = torch.zeros_like(batch.rewards)
        if batch.rewards.shape[0] == 0:
            return {}  # warm-up: the buffer holds too few transitions yet
        batch = type(batch)(*(field.to(self.device) for field in batch))
        # uniform replay weighs every transition alike; a prioritized one sends importance weights
        weights = batch.weights if isinstance(batch, PrioritizedBatch) else torch.ones_like(batch.rewards)
        losses, q_values, td_errors = [], [], []
        for k in range(batch.num_batches):
            if self.gradient_steps_taken % cfg.target_update_interval == 0:
                polyak_update_(self.q_target, self.q, cfg.tau)
            transitions = (field[:, k] for field in batch[:5])
            terms = self.gradient_step(*transitions, weights[:, k], sync=self.gradient_sync)
            self.gradient_steps_taken += 1
            losses.append(terms[0])
            q_values.append(terms[1])
            td_errors.append(terms[2:])
        self.last_td_errors = torch.stack(td_errors, dim=1)
        td_loss, q_value = torch.stack([torch.stack(losses).mean(), torch.stack(q_values).mean()]).tolist()
        return {"td_loss": td_loss, "q_value": q_value}  # one host sync per learn

    def td_errors(self) -> Batched:
        """Each transition's TD error at its gradient step in the last ``learn``, shaped as its
        batch's rewards: the new priorities of a prioritized replay."""
        return self.last_td_errors.cpu()

    def loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The TD loss (``algo.loss``) on a minibatch, each transition's weighted by ``weights``, and
        the loss, the mean Q-value and each transition's TD error (detached) to report: for a
        distributional network, the cross-entropy to the projected target and it."""
        cfg = self.config
        if cfg.distributional:
            return self.distributional_loss(obs, actions, rewards, next_obs, terminated, weights)
        with torch.no_grad():
            next_q = self.q_target(next_obs)
            if cfg.double_dqn:
                next_value = next_q.gather(-1, self.q(next_obs).argmax(-1, keepdim=True)).squeeze(-1)
            else:
                next_value = next_q.max(-1).values
            target = rewards + self.discount * (1.0 - terminated) * next_value
        q = self.q(obs).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        loss = (weights * LOSSES[cfg.loss](q, target, reduction="none")).mean()
        return loss, torch.cat([torch.stack([loss.detach(), q.detach().mean()]), (target - q).detach()])

    def distributional_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """C51's: the target network's distribution of the next state's best action (the online
        network's choice with ``double_dqn``), projected onto the support, and each transition's
        cross-entropy to it, weighted."""
        q, q_target = self.q, self.q_target
        assert isinstance(q, CategoricalQ) and isinstance(q_target, CategoricalQ)
        rows = torch.arange(obs.shape[0], device=obs.device)
        with torch.no_grad():
            next_probs = q_target.logits(next_obs).softmax(-1)
            chooser = q(next_obs) if self.config.double_dqn else (next_probs * q_target.support).sum(-1)
            best = next_probs[rows, chooser.argmax(-1)]
            target = categorical_projection(best, rewards, self.discount * (1.0 - terminated), q_target.support)
        log_probs = q.logits(obs)[rows, actions.long()].log_softmax(-1)
        cross_entropy = -(target * log_probs).sum(-1)
        loss = (weights * cross_entropy).mean()
        expected = (log_probs.detach().exp() * q.support).sum(-1)
        return loss, torch.cat([torch.stack([loss.detach(), expected.mean()]), cross_entropy.detach()])

    def get_weights(self) -> Global:
        return copy_weights(self.q)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "q", "q_target", "optimizer", "gradient_steps_taken")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "q", "q_target", "optimizer", "gradient_steps_taken")


# -- algorithm ---------------------------------------------------------------------------------------
class DQN(Algorithm):
    """DQN: epsilon-greedy collection into a replay buffer, TD updates against a target network."""

    name = "dqn"
    Config = DQNConfig
    actor_class: type[DQNActor] = DQNActor
    """The actor it builds (Ape-X's explores at fixed epsilons)."""

    def __init__(self, config: DQNConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        action_space = check_action_space(config.env_id, "dqn", spec.action_space, (Discrete,))
        obs_shape = observation_shape(config.env_id, spec.observation_space)
        check_network(config.network, config.env_id, spec.observation_space)
        obs_dim = int(np.prod(obs_shape))
        num_actions = action_space.n
        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        self.actor = self.actor_class(obs_dim, num_actions, config, run, spec.observation_space)
        self.final_obs = keeps_final_obs(self.env, config.bootstrap_time_limits)  # a constant of the graph
        # Stacked frames (Atari) are stored once each, not twice per transition in 4 copies.
        frames = spec.frame_stack > 1
        replay: type[Any] = FrameReplayBuffer if frames else ReplayBuffer
        options: dict[str, Any] = {}  # the replay's, beyond what every replay takes
        if config.n_step > 1:
            options.update(n_step=config.n_step, gamma=config.gamma)
        if config.prioritized_replay:
            replay = PrioritizedFrameReplayBuffer if frames else PrioritizedReplayBuffer
            options.update(
                alpha=config.priority_alpha,
                beta=config.priority_beta,
                epsilon=config.priority_epsilon,
                beta_steps=run.total_env_steps,
            )
        self.buffer: Any = replay(  # its kind is the config's: uniform, frames once each, or prioritized
            config.buffer_size,
            obs_shape,
            batch_size=config.batch_size,
            num_batches=config.gradient_steps,
            learning_starts=config.learning_starts,
            seed=run.seed_for("replay"),
            device=run.device,
            final_obs=self.final_obs,
            obs_dtype=observation_dtype(spec.observation_space),
            **options,
        )
        self.learner = DQNLearner(obs_dim, num_actions, config, run, spec.observation_space)

    def train_step(self) -> dict:
        # Collect: train_frequency epsilon-greedy steps of every environment, each into the replay buffer.
        obs = self.env.observe()
        for _ in steps(self.config.train_frequency):
            action = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            last = self.env.final_obs() if self.final_obs else next_obs  # the episodes' last observations
            self.buffer.insert(obs, action, reward, last, terminated, truncated)
            obs = next_obs
        # Replay: gradient_steps batches sampled uniformly (none during the warm-up).
        batch = self.buffer.sample()
        # Update: TD steps against the target network.
        metrics = self.learner.learn(batch)
        if self.config.prioritized_replay:  # the sampled transitions' new priorities, back to the replay
            self.buffer.update_priorities(self.learner.td_errors())
        # Sync: the actor acts with the new weights from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics


# -- Ape-X -------------------------------------------------------------------------------------------
@dataclass
class ApeXConfig(DQNConfig):
    """DQN's settings with Ape-X's (Horgan et al., 2018) on: prioritized replay, 3-step double-Q
    targets and a dueling head, explored by each environment at its own fixed epsilon."""

    n_step: int = 3
    double_dqn: bool = True
    dueling: bool = True
    prioritized_replay: bool = True
    apex_epsilon: float = 0.4
    """Environment i of the run's N explores at ``apex_epsilon ** (1 + apex_alpha * i / (N - 1))``
    (the paper's epsilon per actor, here per environment: from 0.4 down to 0.4^8 = 0.00066)."""
    apex_alpha: float = 7.0
    """How far down the epsilons reach (above)."""

    def validate(self) -> None:
        super().validate()
        if not self.prioritized_replay:
            raise ConfigError("apex_dqn samples a prioritized replay: algo.prioritized_replay must be true")
        if not 0.0 <= self.apex_epsilon <= 1.0 or self.apex_alpha < 0:
            raise ConfigError(
                f"algo.apex_epsilon must be in [0, 1] and algo.apex_alpha >= 0; got {self.apex_epsilon}, "
                f"{self.apex_alpha}"
            )
        schedule = ("exploration_fraction", "start_epsilon", "end_epsilon")
        changed = [name for name in schedule if getattr(self, name) != getattr(DQNConfig, name)]
        if changed:
            raise ConfigError(
                f"algo.{changed[0]} is DQN's epsilon schedule; apex_dqn's environments keep fixed epsilons: "
                "set algo.apex_epsilon and algo.apex_alpha instead"
            )


def apex_epsilons(epsilon: float, alpha: float, indices: range, total: int) -> torch.Tensor:
    """The epsilon of each environment in ``indices`` among the run's ``total``."""
    position = torch.tensor(list(indices), dtype=torch.float64) / max(total - 1, 1)
    return (epsilon ** (1.0 + alpha * position)).to(torch.float32)


def valued_epsilon_greedy(
    q: nn.Module, obs: torch.Tensor, explore: torch.Tensor, random: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The random action where ``explore``, else the greedy one, and its Q-value."""
    values = q(obs)
    action = torch.where(explore, random, values.argmax(-1))
    return action, values.gather(-1, action.unsqueeze(-1)).squeeze(-1)


class ApeXActor(DQNActor):
    """Epsilon-greedy at each environment's fixed epsilon (``apex_epsilons``), reporting the
    Q-value of each action it takes and its value of the next observations, from which the replay
    computes each transition's initial priority."""

    def __init__(
        self, obs_dim: int, num_actions: int, config: ApeXConfig, run: RunInfo, obs_space: Space | None = None
    ) -> None:
        super().__init__(obs_dim, num_actions, config, run, obs_space)
        indices, total = run.share_of(config.num_envs)
        self.epsilons = apex_epsilons(config.apex_epsilon, config.apex_alpha, indices, total).to(self.device)
        self.choose = CompiledCall(self.q, valued_epsilon_greedy, config.compile, key=region_key(config))

    @property
    def epsilon(self) -> float:
        return float(self.epsilons.mean())

    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[Batched, Batched]:
        obs = as_observation(obs, self.device)
        n = obs.shape[0]
        explore = torch.rand(n, generator=self.generator, device=self.device) < self.epsilons
        random = torch.randint(self.num_actions, (n,), generator=self.generator, device=self.device)
        self.env_steps += n
        action, q_taken = self.choose(obs, explore, random)
        return action, q_taken

    @torch.inference_mode()
    def value(self, obs: Any) -> Batched:
        """This copy's estimate of each observation's value: its best action's Q-value."""
        return self.q(as_observation(obs, self.device)).max(-1).values


class ApeX(DQN):
    """Ape-X DQN: actors at fixed epsilons sending transitions with their initial priorities; a
    prioritized replay (in the actors' fragments, or sharded in its own); the learner's priorities
    back to it."""

    name = "apex_dqn"
    Config = ApeXConfig
    actor_class = ApeXActor
    actor: ApeXActor

    def train_step(self) -> dict:
        # Collect: train_frequency steps of every environment at its own epsilon; each transition
        # goes to the replay with the actor's Q-value of it and value of what followed.
        obs = self.env.observe()
        for _ in steps(self.config.train_frequency):
            action, q_taken = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            last = self.env.final_obs() if self.final_obs else next_obs
            self.buffer.insert(obs, action, reward, last, terminated, truncated, q_taken, self.actor.value(last))
            obs = next_obs
        # Replay: gradient_steps batches sampled in proportion to priority.
        batch = self.buffer.sample()
        # Update: TD steps against the target network; the sampled transitions' new priorities back.
        metrics = self.learner.learn(batch)
        self.buffer.update_priorities(self.learner.td_errors())
        # Sync: the actor acts with the new weights from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
