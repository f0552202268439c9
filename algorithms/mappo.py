"""MAPPO and IPPO: PPO for many agents (Yu et al., 2022, "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games"; de Witt et al., 2020, "Is Independent Learning All You Need in the
StarCraft Multi-Agent Challenge?").

Read top to bottom: config, network, the three components (actor, buffer, learner), then the
algorithm, whose ``train_step`` only orchestrates component calls, exactly as PPO's does.  Written
against msrl's public API alone, so every distribution policy runs it as is.

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
from typing import Any, NamedTuple

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
    Buffer,
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
    action_layout,
    check_action_space,
    copy_weights,
    gae,
    load_generator_state,
    normalize_advantages,
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
        self, groups: dict[str, AgentGroup], mapping: dict[str, str], central: bool, hidden: int, seed: int
    ) -> None:
        super().__init__()
        self.groups, self.mapping, self.central = list(groups), mapping, central
        obs_dims = {g: int(np.prod(groups[g].observation_space.shape)) for g in groups}
        self.global_dim = sum(groups[g].num_agents * obs_dims[g] for g in groups) if central else 0
        self.nets = nn.ModuleDict()
        for index, name in enumerate(dict.fromkeys(mapping.values())):
            g = next(g for g in groups if mapping[g] == name)
            # one policy: actor on the agent's observation, critic on global state + observation
            self.nets[name] = ActorCritic(
                obs_dims[g],
                groups[g].action_space,
                hidden,
                seed + 7919 * index,
                critic_dim=self.global_dim + obs_dims[g],
            )

    def net(self, group: str) -> ActorCritic:
        return self.nets[self.mapping[group]]

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

    def __init__(self, agents: Agents, seed: int, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.agents = agents.to(self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

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


class GroupBatch(NamedTuple):
    """One group's share of a drained rollout, flattened over (step, environment) rows:
    ``obs (rows, agents, obs_dim)``, the rest ``(rows, agents[, action_dim])``."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


class MultiAgentRolloutBuffer(Buffer):
    """``num_steps`` steps of ``num_envs`` environments, every agent of every group; ``drain``
    runs GAE per agent (an environment's termination or truncation ends every agent's episode)
    and returns ``{group: GroupBatch}``."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        groups: dict[str, AgentGroup],
        gamma: float,
        gae_lambda: float,
        device: str = "cpu",
    ) -> None:
        self.num_steps, self.num_envs, self.gamma, self.gae_lambda = num_steps, num_envs, gamma, gae_lambda
        self.store: dict[str, dict[str, torch.Tensor]] = {}
        for name, group in groups.items():
            shape = (num_steps, num_envs, group.num_agents)
            action_shape, action_dtype = action_layout(group.action_space)
            self.store[name] = {
                "obs": torch.zeros(shape + tuple(group.observation_space.shape), device=device),
                "actions": torch.zeros(shape + tuple(action_shape), dtype=action_dtype, device=device),
                "logprobs": torch.zeros(shape, device=device),
                "values": torch.zeros(shape, device=device),
                "rewards": torch.zeros(shape, device=device),
            }
        self.terminated = torch.zeros((num_steps, num_envs), device=device)
        self.truncated = torch.zeros((num_steps, num_envs), device=device)
        self.position = 0

    def insert(
        self, obs: Any, actions: Any, logprobs: Any, values: Any, rewards: Any, terminated: Any, truncated: Any
    ) -> NoValue:
        t = self.position
        if t >= self.num_steps:
            raise RuntimeError(f"rollout buffer is full ({self.num_steps} steps); drain it first")
        for name, store in self.store.items():
            for key, value in (
                ("obs", obs),
                ("actions", actions),
                ("logprobs", logprobs),
                ("values", values),
                ("rewards", rewards),
            ):
                store[key][t] = torch.as_tensor(value[name])
        self.terminated[t] = torch.as_tensor(terminated)
        self.truncated[t] = torch.as_tensor(truncated)
        self.position = t + 1

    def drain(self, last_values: Any) -> Batched:
        if self.position != self.num_steps:
            raise RuntimeError(f"rollout buffer holds {self.position} of {self.num_steps} steps")
        self.position = 0
        batch = {}
        for name, s in self.store.items():
            agents = s["rewards"].shape[2]
            spread = lambda flag, agents=agents: flag.unsqueeze(2).expand(-1, -1, agents)  # noqa: E731 - per env -> per agent
            advantages, returns = gae(
                s["rewards"],
                s["values"],
                spread(self.terminated),
                spread(self.truncated),
                torch.as_tensor(last_values[name]),
                self.gamma,
                self.gae_lambda,
            )
            flat = lambda x: x.reshape((-1,) + x.shape[2:]).clone()  # noqa: E731 - (step, env) -> rows
            batch[name] = GroupBatch(
                flat(s["obs"]),
                flat(s["actions"]),
                flat(s["logprobs"]),
                flat(s["values"]),
                flat(advantages),
                flat(returns),
            )
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}  # checkpoints are taken between iterations, when it is empty

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state.get("position", 0))


class MAPPOLearner(Learner):
    """The clipped-surrogate PPO update of every policy at once: one loss, the mean over all
    agents of all groups, one Adam optimiser over every policy's parameters."""

    def __init__(self, agents: Agents, config: MAPPOConfig, seed: int, num_updates: int, device: str = "cpu") -> None:
        self.config = config
        self.device = torch.device(device)
        self.agents = agents.to(self.device)
        self.params = list(self.agents.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=config.learning_rate, eps=1e-5)
        self.generator = torch.Generator(device=self.device).manual_seed(
            seed + 2
        )  # minibatch order, drawn where the data is
        self.num_updates = max(1, num_updates)
        self.updates = 0

    def learn(self, batch: dict[str, GroupBatch]) -> Global:
        cfg = self.config
        data = {g: GroupBatch(*(t.to(self.device) for t in b)) for g, b in batch.items()}
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = cfg.learning_rate * max(0.0, 1.0 - self.updates / self.num_updates)
        self.updates += 1
        rows = next(iter(data.values())).obs.shape[0]
        if rows % cfg.num_minibatches:
            raise ConfigError(
                f"algo.num_minibatches ({cfg.num_minibatches}) must divide the rows each learner "
                f"learns from ({rows} = its num_envs x num_steps)"
            )
        minibatch = rows // cfg.num_minibatches
        for _ in range(cfg.update_epochs):
            order = torch.randperm(rows, generator=self.generator, device=self.device)
            for start in range(0, rows, minibatch):
                index = order[start : start + minibatch]
                pg_loss, v_loss, entropy, _ = self.losses(
                    {g: GroupBatch(*(t[index] for t in b)) for g, b in data.items()}
                )
                loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.sync_grads(self.params)
                nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.optimizer.step()
        return deferred(self.diagnostics, data)

    def losses(self, data: dict[str, GroupBatch]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Surrogate loss, value loss and entropy averaged over every agent sample, and the new
        log-probabilities per group."""
        cfg = self.config
        values = self.agents.values({g: b.obs for g, b in data.items()})
        total = sum(b.logprobs.numel() for b in data.values())
        pg_loss = v_loss = entropy = 0.0
        logprobs = {}
        for g, b in data.items():
            net = self.agents.net(g)
            params = net.policy(b.obs)
            logprobs[g] = net.head.log_prob(params, b.actions)
            ratio = (logprobs[g] - b.logprobs).exp()
            adv = normalize_advantages(b.advantages)
            weight = b.logprobs.numel() / total
            pg_loss = (
                pg_loss
                + weight * torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            )
            v_loss = v_loss + weight * 0.5 * (values[g] - b.returns).square().mean()
            entropy = entropy + weight * net.head.entropy(params).mean()
        return pg_loss, v_loss, entropy, logprobs

    @torch.no_grad()
    def diagnostics(self, data: dict[str, GroupBatch]) -> dict[str, float]:
        pg_loss, v_loss, entropy, logprobs = self.losses(data)
        log_ratio = torch.cat([(logprobs[g] - b.logprobs).reshape(-1) for g, b in data.items()])
        return {
            "policy_loss": float(pg_loss),
            "value_loss": float(v_loss),
            "entropy": float(entropy),
            "approx_kl": float(((log_ratio.exp() - 1) - log_ratio).mean()),
            "learning_rate": float(self.optimizer.param_groups[0]["lr"]),
        }

    def get_weights(self) -> Global:
        return copy_weights(self.agents)

    def state_dict(self) -> dict[str, Any]:
        return {
            "agents": self.agents.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agents.load_state_dict(state["agents"])
        self.optimizer.load_state_dict(state["optimizer"])
        load_generator_state(self.generator, state["generator"])
        self.updates = int(state["updates"])


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
            size = sum(g.num_agents * int(np.prod(g.observation_space.shape)) for g in spec.groups.values())
            if size > CENTRAL_INPUT_LIMIT:
                raise ConfigError(
                    f"a centralised critic would take a global state of {size:,} numbers per environment "
                    f"(limit {CENTRAL_INPUT_LIMIT:,}); use algo.critic: decentralised (IPPO) for "
                    f"{spec.num_agents} agents"
                )
        num_updates = -(-run.total_env_steps // config.rows)
        make_agents = lambda: Agents(spec.groups, mapping, central, config.hidden_size, run.seed)  # noqa: E731
        self.env = msrl.envs.make(config.env_id, config.num_envs, seed=run.data_seed, **config.env_kwargs)
        self.actor = MultiAgentActor(make_agents(), run.data_seed + 1, run.device)
        self.buffer = MultiAgentRolloutBuffer(
            config.num_steps, config.num_envs, spec.groups, config.gamma, config.gae_lambda, run.device
        )
        self.learner = MAPPOLearner(make_agents(), config, run.seed, num_updates, run.device)

    def train_step(self) -> dict:
        # Rollout: every agent of every environment acts num_steps times with the current policies.
        obs = self.env.observe()
        for _ in steps(self.config.num_steps):
            actions, logprobs, values = self.actor.act(obs)
            next_obs, rewards, terminated, truncated = self.env.step(actions)
            self.buffer.insert(obs, actions, logprobs, values, rewards, terminated, truncated)
            obs = next_obs
        # Advantages: bootstrap every agent from its value of the last observation, then GAE.
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
