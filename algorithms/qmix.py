"""QMIX (Rashid et al., 2018) and VDN (Sunehag et al., 2018): cooperative agents' Q-values mixed
into the team's, trained from whole episodes.

Every agent acts on its own Q-network, one network shared by all agents (its input the agent's
observation and a one-hot of its index; a GRU between two layers with ``recurrent``), epsilon-greedy
with epsilon annealed linearly.  Whole episodes go into an episode replay
(``msrl.rl.EpisodeReplay``); the learner unrolls the network over a batch of them, takes each
agent's Q of the action it took, and mixes them into the team's ``Q_tot``: for QMIX by a network
whose weights a hypernetwork makes from the global state (every agent's observation) and keeps
non-negative, so ``Q_tot`` rises with each agent's Q; for VDN by their sum.  The target is
``r + gamma * Q_tot'(s')`` with the target networks, each agent's next action picked by the online
network (double Q), rewards standardised by their running statistics, the team's reward the mean
of the agents'.  An episode's last step is terminal, also where a time limit cut it; with
``bootstrap_time_limits`` a cut episode's last step bootstraps from its last observation (the
environment's ``final_obs()``), as EPyMARL's runners do where the environment marks the limit in
its info (SMAC); its wrapper of gymnasium and PettingZoo environments (MPE) does not, so EPyMARL
ends simple_spread's episodes as terminal, as the default here does.

EPyMARL's settings (``src/config/default.yaml`` and ``algs/qmix.yaml``): Adam at 5e-4, batches of
32 episodes, 5,000 in the replay, the target networks copied every 200 updates, epsilon from 1 to
0.05 over 50,000 steps, gradients clipped to 10, 64 hidden units, a mixing embedding of 32 from a
two-layer hypernetwork of 64, standardised rewards, agent ids in the input.  The agents' network
here has a GRU (``recurrent``: EPyMARL's ``rnn`` agent with ``use_rnn``); its ``qmix.yaml`` sets
``use_rnn: False``, a feed-forward layer in the GRU's place, which ``recurrent: false`` gives.  EPyMARL takes one
update per episode from one environment; here ``num_envs`` environments play an episode each per
iteration and ``gradient_steps`` updates follow, as many by default.

Read top to bottom: config, networks, components, algorithm.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, cast

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
    Discrete,
    Global,
    Learner,
    NoValue,
    RunInfo,
    check_unit_interval,
    split,
    steps,
)
from msrl.rl import (
    EpisodeBatch,
    EpisodeReplay,
    GradientStep,
    RunningMeanStd,
    check_compile_option,
    copy_weights,
    keeps_final_obs,
    load_state,
    load_weights,
    mlp,
    region_key,
    save_state,
)

MIXERS = ("qmix", "vdn")


@dataclass
class EpisodeConfig:
    """What every algorithm trained from whole multi-agent episodes sets (QMIX's, VDN's, MADDPG's)."""

    env_id: str = "simple_spread_v3"
    """A cooperative multi-agent environment from msrl.envs, every agent with the same Box
    observations and Discrete actions."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment."""
    num_envs: int = split(8)
    """Environments played together, one episode each per iteration (a per-run quantity)."""
    episode_length: int = 25
    """Steps per iteration: the environment's episode length (simple_spread's 25)."""
    gradient_steps: int = 8
    """Updates per iteration (one per episode played, as EPyMARL)."""
    batch_size: int = split(32)
    """Episodes per update, over the whole run."""
    buffer_size: int = split(5000)
    """Replay capacity in episodes, over the whole run."""
    learning_rate: float = 5e-4
    """Adam step size of every network."""
    gamma: float = 0.99
    """Discount factor."""
    target_update_interval: int = 200
    """Updates between copies of the networks into the targets."""
    hidden_size: int = 64
    """Width of the agents' network (and its GRU)."""
    recurrent: bool = True
    """A GRU in the agents' network, unrolled over each episode (EPyMARL's ``use_rnn``, which its
    ``qmix.yaml`` turns off); false: a second feed-forward layer in its place."""
    standardise_rewards: bool = True
    """Scale rewards by their running statistics in the targets (EPyMARL's ``standardise_rewards``)."""
    bootstrap_time_limits: bool = False
    """Keep the last observation of an episode cut by its time limit (the environment's
    ``final_obs()``) and bootstrap its last step from it, as EPyMARL does on SMAC; false (the
    default) ends every episode as terminal, as EPyMARL's runner does on MPE and the MAPPO paper's
    code does: on simple_spread at 500k steps QMIX's returns fell through training with it on
    (BENCHMARKS.md)."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip of each network."""
    compile: bool | str = False
    """The updates as compiled regions: ``auto`` switches to them once built, ``true`` waits for
    them, ``false`` (the default: the unrolled episode makes a large graph): eager."""

    def validate(self) -> None:
        check_unit_interval(self, "gamma")
        for name in ("num_envs", "episode_length", "gradient_steps", "batch_size", "buffer_size", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        if self.target_update_interval < 1:
            raise ConfigError(f"algo.target_update_interval must be >= 1, got {self.target_update_interval}")
        check_compile_option(self.compile)


@dataclass
class QMIXConfig(EpisodeConfig):
    epsilon_start: float = 1.0
    """Exploration: the probability of a uniformly random action at the start."""
    epsilon_finish: float = 0.05
    """Exploration after the annealing."""
    epsilon_anneal_steps: int = split(50_000)
    """Env steps over which epsilon falls linearly, over the whole run."""
    mixer: str = "qmix"
    """How agents' Q-values make the team's: ``qmix`` (a monotonic mixing network of the state) or
    ``vdn`` (their sum)."""
    mixing_embed: int = 32
    """Width of QMIX's mixing network."""
    hypernet_embed: int = 64
    """Width of the hypernetworks that make the mixing network's weights."""
    double_q: bool = True
    """Pick each agent's next action with the online network, value it with the target network."""

    def validate(self) -> None:
        super().validate()
        for name in ("epsilon_start", "epsilon_finish"):
            check_unit_interval(self, name)
        if self.mixer not in MIXERS:
            raise ConfigError(f"unknown algo.mixer {self.mixer!r}; valid choices: {', '.join(MIXERS)}")


def standardised(stats: RunningMeanStd, batch: EpisodeBatch) -> Tensor:
    """``batch``'s rewards scaled by the statistics of every reward sampled so far, this batch's
    (the steps its mask keeps) folded in first."""
    stats.update(batch.rewards[batch.mask > 0])
    return (batch.rewards - stats.mean.float()) / stats.var.float().sqrt().clamp_min(1e-8)


# -- networks ------------------------------------------------------------------------------------
class AgentQ(nn.Module):
    """One agent's Q-values from its observation and its one-hot index: a layer, a GRU cell (or a
    second layer), a linear head.  ``forward(inputs, memory) -> (q, memory)``."""

    def __init__(self, inputs: int, actions: int, hidden: int, recurrent: bool, generator: torch.Generator) -> None:
        super().__init__()
        self.recurrent, self.hidden = recurrent, hidden
        self.fc = mlp([inputs, hidden], generator=generator)
        if recurrent:
            self.rnn: nn.Module = nn.GRUCell(hidden, hidden)
            with torch.no_grad():
                bound = 1.0 / np.sqrt(hidden)
                for weight in self.rnn.parameters():
                    weight.uniform_(-bound, bound, generator=generator)
        else:
            self.rnn = mlp([hidden, hidden], generator=generator)
        self.head = mlp([hidden, actions], generator=generator)

    def forward(self, inputs: Tensor, memory: Tensor) -> tuple[Tensor, Tensor]:
        x = torch.relu(self.fc(inputs))
        memory = self.rnn(x, memory) if self.recurrent else torch.relu(self.rnn(x))
        return self.head(memory), memory


class QMixer(nn.Module):
    """``Q_tot`` from the agents' Q-values and the state: one hidden layer (ELU) whose weights,
    and the output's, are the absolute values of hypernetworks of the state, so ``Q_tot`` is
    monotonic in every agent's Q; the biases and a state value are free."""

    def __init__(self, agents: int, state_dim: int, embed: int, hyper: int, generator: torch.Generator) -> None:
        super().__init__()
        self.agents, self.embed = agents, embed
        self.hyper_w1 = mlp([state_dim, hyper, embed * agents], nn.ReLU, generator)
        self.hyper_w2 = mlp([state_dim, hyper, embed], nn.ReLU, generator)
        self.hyper_b1 = mlp([state_dim, embed], generator=generator)
        self.value = mlp([state_dim, embed, 1], nn.ReLU, generator)

    def forward(self, qs: Tensor, state: Tensor) -> Tensor:
        """``qs`` ``(..., agents)`` and ``state`` ``(..., state_dim)`` -> ``Q_tot`` ``(...)``."""
        lead = qs.shape[:-1]
        state = state.reshape(-1, state.shape[-1])
        w1 = self.hyper_w1(state).abs().view(-1, self.agents, self.embed)
        hidden = nn.functional.elu(torch.bmm(qs.reshape(-1, 1, self.agents), w1) + self.hyper_b1(state).unsqueeze(1))
        w2 = self.hyper_w2(state).abs().view(-1, self.embed, 1)
        return (torch.bmm(hidden, w2).squeeze(-1) + self.value(state)).view(lead)


class VDNMixer(nn.Module):
    """``Q_tot`` as the sum of the agents' Q-values."""

    def forward(self, qs: Tensor, state: Tensor) -> Tensor:
        return qs.sum(-1)


def agent_inputs(obs: Tensor) -> Tensor:
    """Each agent's observation with its one-hot index appended: ``(..., agents, obs_dim + agents)``."""
    agents = obs.shape[-2]
    ids = torch.eye(agents, dtype=obs.dtype, device=obs.device).expand(*obs.shape[:-1], agents)
    return torch.cat((obs, ids), dim=-1)


def unroll(net: AgentQ, obs: Tensor) -> Tensor:
    """``net``'s outputs over every step of a batch of episodes ``(B, T + 1, agents, obs_dim)``, its
    memories carried from step to step from blank: ``(B, T + 1, agents, outputs)``."""
    episodes, length, agents = obs.shape[:3]
    inputs = agent_inputs(obs)
    memory = torch.zeros(episodes * agents, net.hidden, device=obs.device)
    values = []
    for t in range(length):
        out, memory = net(inputs[:, t].reshape(episodes * agents, -1), memory)
        values.append(out.view(episodes, agents, -1))
    return torch.stack(values, 1)


# -- components ------------------------------------------------------------------------------------
class QMIXActor(Actor):
    """Every agent's epsilon-greedy action from the shared network, remembering each agent's GRU
    state through the episode (``forget`` clears the ended ones)."""

    def __init__(
        self,
        net: AgentQ,
        groups: dict[str, int],
        actions: int,
        run: RunInfo,
        epsilon: tuple[float, float, int] = (0.0, 0.0, 1),
    ) -> None:
        self.device = torch.device(run.device)
        self.net = net.to(self.device)
        self.groups, self.actions = groups, actions
        self.start, self.finish, self.anneal = epsilon  # from, to, over how many env steps
        self.generator = run.rng("actor")
        self.env_steps = 0
        self.memory: Tensor | None = None
        self.greedy_memory: Tensor | None = None

    def epsilon(self) -> float:
        fraction = min(1.0, self.env_steps / max(1, self.anneal))
        return self.start + fraction * (self.finish - self.start)

    def _obs(self, obs: Any) -> Tensor:
        return torch.cat([torch.as_tensor(obs[g], dtype=torch.float32, device=self.device) for g in self.groups], 1)

    def _q(self, obs: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor]:
        envs, agents = obs.shape[:2]
        if memory is None or memory.shape[0] != envs * agents:
            memory = torch.zeros(envs * agents, self.net.hidden, device=self.device)
        q, memory = self.net(agent_inputs(obs).reshape(envs * agents, -1), memory)
        return q.view(envs, agents, -1), memory

    def _split(self, actions: Tensor) -> dict[str, Tensor]:
        return dict(zip(self.groups, torch.split(actions, list(self.groups.values()), dim=1)))

    @torch.inference_mode()
    def act(self, obs: Any) -> Batched:
        obs = self._obs(obs)
        q, self.memory = self._q(obs, self.memory)
        epsilon = self.epsilon()
        self.env_steps += obs.shape[0]
        greedy = q.argmax(-1)
        random = torch.randint(self.actions, greedy.shape, generator=self.generator, device=self.device)
        explore = torch.rand(greedy.shape, generator=self.generator, device=self.device) < epsilon
        return self._split(torch.where(explore, random, greedy))

    def forget(self, terminated: Any, truncated: Any) -> NoValue:
        """Blank the memories of the agents whose episode ended."""
        if self.memory is None or not self.net.recurrent:
            return
        ended = (torch.as_tensor(terminated) + torch.as_tensor(truncated)) > 0
        keep = (~ended).to(self.device).float().repeat_interleave(self.memory.shape[0] // ended.shape[0])
        self.memory = self.memory * keep.unsqueeze(1)

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        q, self.greedy_memory = self._q(self._obs(obs), self.greedy_memory)
        return self._split(q.argmax(-1))

    def reset_greedy(self) -> None:
        self.greedy_memory = None

    def set_weights(self, weights: dict[str, Tensor]) -> NoValue:
        load_weights(self.net, weights)

    def state_dict(self) -> dict[str, Any]:
        return {**save_state(self, "net", "generator", "env_steps"), "memory": self.memory}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "net", "generator", "env_steps")
        self.memory = state.get("memory")  # the episodes in progress (absent after a regrouping)


class QMIXLearner(Learner):
    """Double-Q targets mixed by the target mixer, the squared TD error of ``Q_tot`` over the
    episodes' steps, one Adam over the agents' network and the mixer."""

    def __init__(self, net: AgentQ, agents: int, obs_dim: int, config: QMIXConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        generator = torch.Generator().manual_seed(run.seed_for("weights", 1))  # the mixer's: after the agents'
        self.net = net.to(self.device)
        self.agents = agents
        state_dim = agents * obs_dim
        mixer = QMixer(agents, state_dim, config.mixing_embed, config.hypernet_embed, generator)
        self.mixer = (mixer if config.mixer == "qmix" else VDNMixer()).to(self.device)
        self.modules = nn.ModuleDict({"net": self.net, "mixer": self.mixer})
        self.target = copy.deepcopy(self.modules).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.modules.parameters(), lr=config.learning_rate)
        self.rewards = RunningMeanStd(device=self.device)
        self.updates = 0
        self.step = GradientStep(
            self.modules,
            self.optimizer,
            self.loss,
            config.max_grad_norm,
            config.compile,
            (self.target,),
            key=region_key(config),
        )

    def learn(self, batch: EpisodeBatch) -> Global:
        if batch.rewards.shape[0] == 0:
            return {}  # warm-up: too few episodes yet
        batch = EpisodeBatch(*(field.to(self.device) for field in batch))
        rewards = standardised(self.rewards, batch) if self.config.standardise_rewards else batch.rewards
        total = torch.zeros(3, dtype=torch.float64, device=self.device)
        for k in range(batch.num_batches):
            episodes = batch.minibatch(k)
            values = (episodes.obs, episodes.actions, rewards[:, k], episodes.terminated, episodes.mask)
            total = total + self.step(*values, sync=self.gradient_sync).double()
            self.updates += 1
            if self.updates % self.config.target_update_interval == 0:
                self.target.load_state_dict(self.modules.state_dict())
        td_loss, q_total, target = (total / batch.num_batches).tolist()
        return {"td_loss": td_loss, "q_total_mean": q_total, "target_mean": target}

    def unroll(self, net: AgentQ, obs: Tensor) -> Tensor:
        """The network's Q-values over every step of every episode: ``(B, T + 1, agents, actions)``."""
        return unroll(net, obs)

    def loss(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, terminated: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The masked mean squared TD error of ``Q_tot``, and to report (detached) it, the mean
        ``Q_tot`` of the actions taken and the mean target (EPyMARL's ``q_taken_mean`` and
        ``target_mean``: a value that runs away from its target shows here first)."""
        cfg = self.config
        state = obs.flatten(2)  # every agent's observation: (B, T + 1, agents * obs_dim)
        q = self.unroll(self.net, obs)
        taken = q[:, :-1].gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            target_q = self.unroll(cast(AgentQ, self.target["net"]), obs)[:, 1:]
            if cfg.double_q:
                best = q[:, 1:].detach().argmax(-1, keepdim=True)
                next_q = target_q.gather(-1, best).squeeze(-1)
            else:
                next_q = target_q.max(-1).values
            next_total = self.target["mixer"](next_q, state[:, 1:])
            target = rewards + cfg.gamma * (1.0 - terminated) * next_total
        total = self.mixer(taken, state[:, :-1])
        steps = mask.sum().clamp_min(1.0)
        loss = ((total - target).square() * mask).sum() / steps
        means = torch.stack([(total.detach() * mask).sum(), (target * mask).sum()]) / steps
        return loss, torch.cat([loss.detach().unsqueeze(0), means])

    def get_weights(self) -> Global:
        return copy_weights(self.net)

    _STATE = ("modules", "target", "optimizer", "updates", "rewards")

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, *self._STATE)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, *self._STATE)


@dataclass(frozen=True)
class AgentLayout:
    """A cooperative environment's agents as one row: each group's size, in order, their total, one
    agent's observation width and its number of actions."""

    sizes: dict[str, int]
    agents: int
    obs_dim: int
    actions: int


def multi_agent_layout(algorithm: str, env_id: str, env_kwargs: dict[str, Any]) -> AgentLayout:
    """The agents of ``env_id``, or one line where they do not share Box observations and Discrete
    actions (what one shared network over all agents needs)."""
    spec = msrl.envs.spec(env_id, **env_kwargs)
    groups = spec.groups or {}
    kinds = {(str(g.observation_space), str(g.action_space)) for g in groups.values()}
    first = next(iter(groups.values()), None)
    if (
        first is None
        or len(kinds) != 1
        or not isinstance(first.observation_space, Box)
        or not isinstance(first.action_space, Discrete)
    ):
        raise ConfigError(
            f"{algorithm} needs a multi-agent environment whose agents share Box observations and Discrete "
            f"actions; {env_id} has {kinds or 'one agent'}"
        )
    return AgentLayout(
        sizes={name: g.num_agents for name, g in groups.items()},
        agents=sum(g.num_agents for g in groups.values()),
        obs_dim=int(np.prod(first.observation_space.shape)),
        actions=first.action_space.n,
    )


# -- algorithm ---------------------------------------------------------------------------------------
class QMIX(Algorithm):
    """QMIX: episodes of epsilon-greedy agents, a monotonic mixer of their Q-values, double-Q targets."""

    name = "qmix"
    Config = QMIXConfig

    def __init__(self, config: QMIXConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        layout = multi_agent_layout(self.name, config.env_id, config.env_kwargs)

        def make_net() -> AgentQ:
            generator = torch.Generator().manual_seed(run.seed_for("weights"))
            return AgentQ(
                layout.obs_dim + layout.agents, layout.actions, config.hidden_size, config.recurrent, generator
            )

        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        self.final_obs = keeps_final_obs(self.env, config.bootstrap_time_limits)  # a constant of the graph
        schedule = (config.epsilon_start, config.epsilon_finish, config.epsilon_anneal_steps)
        self.actor = QMIXActor(make_net(), layout.sizes, layout.actions, run, schedule)
        self.buffer = EpisodeReplay(
            config.buffer_size,
            config.episode_length,
            config.num_envs,
            list(layout.sizes),
            layout.agents,
            layout.obs_dim,
            batch_size=config.batch_size,
            num_batches=config.gradient_steps,
            seed=run.seed_for("replay"),
            device=run.device,
            final_obs=self.final_obs,
        )
        self.learner = QMIXLearner(make_net(), layout.agents, layout.obs_dim, config, run)

    def train_step(self) -> dict:
        # Episodes: every environment plays episode_length steps, each step into the episode replay.
        obs = self.env.observe()
        for _ in steps(self.config.episode_length):
            actions = self.actor.act(obs)
            next_obs, rewards, terminated, truncated = self.env.step(actions)
            last = self.env.final_obs() if self.final_obs else next_obs  # the episodes' last observations
            self.buffer.insert(obs, actions, rewards, last, terminated, truncated)
            self.actor.forget(terminated, truncated)
            obs = next_obs
        # Replay: a batch of whole episodes (none during the warm-up).
        batch = self.buffer.sample()
        # Update: gradient_steps steps of the agents' network and the mixer on it.
        metrics = self.learner.learn(batch)
        # Sync: the agents act with the new network from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics


@dataclass
class VDNConfig(QMIXConfig):
    mixer: str = "vdn"
    """``vdn``: the team's Q is the sum of the agents' (``qmix``: QMIX's mixing network)."""


class VDN(QMIX):
    """VDN: QMIX's loop and update with the agents' Q-values summed."""

    name = "vdn"
    Config = VDNConfig
