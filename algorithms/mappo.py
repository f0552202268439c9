"""MAPPO and IPPO: PPO for many agents (Yu et al., 2022, "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games"; de Witt et al., 2020, "Is Independent Learning All You Need in the
StarCraft Multi-Agent Challenge?").

Read top to bottom: config, network, the actor and the learner, then the algorithm, whose
``train_step`` only orchestrates component calls, exactly as PPO's does; the rollout buffer, the
clipped surrogate and the epoch loop are PPO's own, from ``msrl.rl``.  Written against msrl's
public API alone, so every distribution policy runs it as is.

* Actors are decentralised: each agent acts on its own observation.  Agents of one group share
  a policy; several groups share one when ``policies`` maps them to the same name (their spaces
  must then match), or all agents share one when ``policies`` is empty.
* The critic is *centralised* for MAPPO: it sees the environment's global state, the
  concatenated observations of every agent, beside the agent's own observation (the paper's
  "agent-specific global state").  IPPO's critic sees the agent's own observation only, which is
  what scales to thousands of agents per environment.
* Every agent's transition is a PPO sample: rewards are per agent, GAE runs per agent, the loss
  averages over all agents of all groups.  Minibatches are drawn over (step, environment) rows, so
  the centralised critic always sees a whole environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from torch import nn

import msrl.envs
from msrl.core import (
    Actor,
    AgentGroup,
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
    deferred,
    split,
    steps,
)
from msrl.rl import (
    ActorCritic,
    RolloutBatch,
    RolloutBuffer,
    check_action_space,
    clipped_surrogate,
    copy_weights,
    group_batches,
    linear_lr,
    load_generator_state,
    load_state,
    normalize_advantages,
    observation_shape,
    ppo_epochs,
    save_state,
)

CENTRAL_INPUT_LIMIT = 4096
"""Largest global state (numbers per environment) the centralised critic takes: beyond it the
critic's first layer alone outgrows the policy by orders of magnitude; use IPPO's critic."""


@dataclass
class MAPPOConfig:
    env_id: str = "simple_spread_v3"
    """Multi-agent environment id from msrl.envs (one with agent groups)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the environment (Tag's constants, simple_spread's N...)."""
    num_envs: int = split(32)
    """Environments stepped together in the whole run (msrl shares them out among fragment copies)."""
    num_steps: int = 25
    """Steps per environment per iteration (rollout length)."""
    critic: str = "centralised"
    """``centralised`` (MAPPO: global state and own observation) or ``decentralised`` (IPPO)."""
    policies: dict = field(default_factory=dict)
    """Group -> policy name; groups mapped to one name share its parameters.  Empty: one policy
    shared by every agent (all groups must then have the same spaces)."""
    learning_rate: float = 7e-4
    """Adam step size."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    update_epochs: int = 10
    """Passes over each rollout."""
    num_minibatches: int = 1
    """Minibatches per pass (over (step, environment) rows)."""
    clip_coef: float = 0.2
    """Surrogate clipping range."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 1.0
    """Value loss coefficient."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip (the MAPPO paper's 10)."""
    hidden_size: int = 64
    """Width of the two hidden layers of each policy and critic."""

    @property
    def rows(self) -> int:
        return self.num_envs * self.num_steps

    def validate(self) -> None:
        check_unit_interval(self, "gamma", "gae_lambda")
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.critic not in ("centralised", "decentralised"):
            raise ConfigError(f"algo.critic must be centralised (MAPPO) or decentralised (IPPO), got {self.critic!r}")
        if self.rows % self.num_minibatches:
            raise ConfigError(
                f"algo.num_minibatches ({self.num_minibatches}) must divide num_envs*num_steps ({self.rows})"
            )
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        if not all(isinstance(k, str) and isinstance(v, str) and v for k, v in self.policies.items()):
            raise ConfigError("algo.policies maps group names to policy names (strings)")


def policy_map(
    env_id: str, groups: dict[str, AgentGroup] | None, policies: dict[str, str], algorithm: str
) -> dict[str, str]:
    """Group -> policy name, checked: every group has a policy, no policy names an unknown
    group, and groups sharing a policy have the same spaces."""
    if not groups:
        raise ConfigError(
            f"{algorithm} needs a multi-agent environment (one with agent groups); {env_id} has a single agent: use ppo"
        )
    if policies:
        unknown = sorted(set(policies) - set(groups))
        if unknown:
            raise ConfigError(
                f"algo.policies names groups {unknown} that {env_id} does not have; its groups: {', '.join(groups)}"
            )
        missing = [g for g in groups if g not in policies]
        if missing:
            raise ConfigError(
                f"group {missing[0]!r} of {env_id} has no policy in algo.policies; give every group "
                f"one: {', '.join(groups)}"
            )
        mapping = dict(policies)
    else:
        mapping = {g: "shared" for g in groups}
    for name in dict.fromkeys(mapping.values()):
        members = [g for g in groups if mapping[g] == name]
        first = groups[members[0]]
        for g in members[1:]:
            if (groups[g].observation_space, groups[g].action_space) != (first.observation_space, first.action_space):
                raise ConfigError(
                    f"groups {members[0]!r} and {g!r} of {env_id} have different spaces and cannot share "
                    f"policy {name!r}; map them to different names in algo.policies"
                )
    return mapping


# -- network -------------------------------------------------------------------------------------------
class Agents(nn.Module):
    """Every policy of the run, and how each group's observations reach its actor and critic."""

    def __init__(
        self, groups: dict[str, AgentGroup], mapping: dict[str, str], central: bool, hidden: int, run: RunInfo
    ) -> None:
        super().__init__()
        self.groups, self.mapping, self.central = list(groups), mapping, central
        obs_dims = {g: int(np.prod(observation_shape(f"group {g!r}", groups[g].observation_space))) for g in groups}
        self.global_dim = sum(groups[g].num_agents * obs_dims[g] for g in groups) if central else 0
        self.nets = nn.ModuleDict()
        for index, name in enumerate(dict.fromkeys(mapping.values())):
            g = next(g for g in groups if mapping[g] == name)
            # one policy: actor on the agent's observation, critic on global state + observation
            self.nets[name] = ActorCritic(
                obs_dims[g],
                groups[g].action_space,
                hidden,
                run.seed_for("weights", index),
                critic_dim=self.global_dim + obs_dims[g],
            )

    def net(self, group: str) -> ActorCritic:
        return cast(ActorCritic, self.nets[self.mapping[group]])

    def critic_inputs(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per group ``(rows, agents, critic_dim)``: the observation, preceded for a centralised
        critic by the global state (every agent's observation, groups in order)."""
        if not self.central:
            return obs
        rows = next(iter(obs.values())).shape[0]
        state = torch.cat([obs[g].reshape(rows, -1) for g in self.groups], dim=1)
        return {g: torch.cat((state.unsqueeze(1).expand(-1, o.shape[1], -1), o), dim=2) for g, o in obs.items()}

    def values(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {g: self.net(g).value(x) for g, x in self.critic_inputs(obs).items()}


# -- components ----------------------------------------------------------------------------------------
class MultiAgentActor(Actor):
    """Acts for every agent with its own copy of the policies: ``act(obs) -> (actions,
    logprobs, values)``, each a dict per group of ``(num_envs, agents)`` tensors."""

    def __init__(self, agents: Agents, run: RunInfo) -> None:
        self.device = torch.device(run.device)
        self.agents = agents.to(self.device)
        self.generator = run.rng("actor")

    def _obs(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {g: torch.as_tensor(o, dtype=torch.float32, device=self.device) for g, o in obs.items()}

    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[Batched, Batched, Batched]:
        obs = self._obs(obs)
        actions, logprobs = {}, {}
        for g, o in obs.items():
            net = self.agents.net(g)
            actions[g], logprobs[g] = net.head.sample(net.policy(o), self.generator)
        return actions, logprobs, self.agents.values(obs)

    @torch.inference_mode()
    def value(self, obs: Any) -> Batched:
        return self.agents.values(self._obs(obs))

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return {g: self.agents.net(g).head.mode(self.agents.net(g).policy(o)) for g, o in self._obs(obs).items()}

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        self.agents.load_state_dict(weights)

    def state_dict(self) -> dict[str, Any]:
        return {"agents": self.agents.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agents.load_state_dict(state["agents"])
        load_generator_state(self.generator, state["generator"])


class MAPPOLearner(Learner):
    """The clipped-surrogate PPO update of every policy at once: one loss, the mean over all
    agents of all groups, one Adam optimiser over every policy's parameters.  It learns from the
    buffer's grouped batch (``msrl.rl.flat_groups``: one flat mapping, so it crosses fragments as is)."""

    def __init__(self, agents: Agents, config: MAPPOConfig, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.agents = agents.to(self.device)
        self.params = list(self.agents.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=config.learning_rate, eps=1e-5)
        self.generator = run.rng("learner")  # minibatch order, drawn where the data is
        self.num_updates = run.num_updates(config.rows)
        self.updates = 0

    def learn(self, batch: dict[str, torch.Tensor]) -> Global:
        cfg = self.config
        data = {key: t.to(self.device) for key, t in batch.items()}
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = linear_lr(cfg.learning_rate, self.updates, self.num_updates)
        self.updates += 1
        rows = next(iter(data.values())).shape[0]
        if rows % cfg.num_minibatches:
            raise ConfigError(
                f"algo.num_minibatches ({cfg.num_minibatches}) must divide the rows each learner "
                f"learns from ({rows} = its num_envs x num_steps)"
            )
        for minibatch in ppo_epochs(data, cfg.update_epochs, cfg.num_minibatches, self.generator):
            pg_loss, v_loss, entropy, _ = self.losses(group_batches(minibatch))
            loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.sync_grads(self.params)
            nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
            self.optimizer.step()
        return deferred(self.diagnostics, data)

    def losses(
        self, data: dict[str, RolloutBatch]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Surrogate loss, value loss and entropy averaged over every agent sample, and the new
        log-probabilities per group."""
        cfg = self.config
        values = self.agents.values({g: b.obs for g, b in data.items()})
        total = sum(b.logprobs.numel() for b in data.values())
        pg_loss = v_loss = entropy = torch.zeros((), device=self.device)
        logprobs = {}
        for g, b in data.items():
            net = self.agents.net(g)
            params = net.policy(b.obs)
            logprobs[g] = net.head.log_prob(params, b.actions)
            adv = normalize_advantages(b.advantages)
            weight = b.logprobs.numel() / total
            pg_loss = pg_loss + weight * clipped_surrogate(logprobs[g], b.logprobs, adv, cfg.clip_coef)
            v_loss = v_loss + weight * 0.5 * (values[g] - b.returns).square().mean()
            entropy = entropy + weight * net.head.entropy(params).mean()
        return pg_loss, v_loss, entropy, logprobs

    @torch.no_grad()
    def diagnostics(self, data: dict[str, torch.Tensor]) -> dict[str, float]:
        batches = group_batches(data)
        pg_loss, v_loss, entropy, logprobs = self.losses(batches)
        log_ratio = torch.cat([(logprobs[g] - b.logprobs).reshape(-1) for g, b in batches.items()])
        values = torch.stack([pg_loss, v_loss, entropy, ((log_ratio.exp() - 1) - log_ratio).mean()]).tolist()
        return {
            **dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl"), values)),
            "learning_rate": float(self.optimizer.param_groups[0]["lr"]),
        }

    def get_weights(self) -> Global:
        return copy_weights(self.agents)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "agents", "optimizer", "generator", "updates")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "agents", "optimizer", "generator", "updates")


# -- algorithms ----------------------------------------------------------------------------------------
class MAPPO(Algorithm):
    """Multi-agent PPO with decentralised actors and a centralised critic."""

    name = "mappo"
    Config = MAPPOConfig

    def __init__(self, config: MAPPOConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        spec = msrl.envs.spec(config.env_id, **config.env_kwargs)
        mapping = policy_map(config.env_id, spec.groups, config.policies, self.name)
        for name, group in spec.groups.items():
            check_action_space(f"{config.env_id} group {name!r}", self.name, group.action_space, (Discrete, Box))
        central = config.critic == "centralised"
        if central:
            size = sum(
                g.num_agents * int(np.prod(observation_shape(config.env_id, g.observation_space)))
                for g in spec.groups.values()
            )
            if size > CENTRAL_INPUT_LIMIT:
                raise ConfigError(
                    f"a centralised critic would take a global state of {size:,} numbers per environment "
                    f"(limit {CENTRAL_INPUT_LIMIT:,}); use algo.critic: decentralised (IPPO) for "
                    f"{spec.num_agents} agents"
                )
        make_agents = lambda: Agents(spec.groups, mapping, central, config.hidden_size, run)  # noqa: E731
        self.env = msrl.envs.make(config.env_id, config.num_envs, seed=run.seed_for("env"), **config.env_kwargs)
        self.actor = MultiAgentActor(make_agents(), run)
        self.buffer = RolloutBuffer(
            config.num_steps,
            config.num_envs,
            groups=spec.groups,
            gamma=config.gamma,
            gae_lambda=config.gae_lambda,
            device=run.device,
        )
        self.learner = MAPPOLearner(make_agents(), config, run)

    def train_step(self) -> dict:
        # Rollout: every agent of every environment acts num_steps times with the current policies.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            actions, logprobs, values = self.actor.act(obs)
            next_obs, rewards, terminated, truncated = self.env.step(actions)
            self.buffer.insert(obs, actions, logprobs, values, rewards, terminated, truncated)
            obs = next_obs
        # Advantages: bootstrap every agent from its value of the last observation, then GAE per agent.
        batch = self.buffer.drain(self.actor.value(obs))
        # Update: PPO epochs over minibatches of (step, environment) rows.
        metrics = self.learner.learn(batch)
        # Sync: the actors act with the new weights from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics


@dataclass
class IPPOConfig(MAPPOConfig):
    critic: str = "decentralised"
    """``decentralised`` (IPPO: the agent's own observation) or ``centralised`` (MAPPO)."""


class IPPO(MAPPO):
    """Independent PPO: MAPPO's update with each agent's critic on its own observation."""

    name = "ippo"
    Config = IPPOConfig
