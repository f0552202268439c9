"""MAPPO and IPPO: PPO for many agents (Yu et al., 2022, "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games"; de Witt et al., 2020, "Is Independent Learning All You Need in the
StarCraft Multi-Agent Challenge?").

Read top to bottom: config, then the algorithm, whose ``train_step`` only orchestrates component
calls, exactly as PPO's does.  The components (policies, actor, rollout buffer with active masks,
learner) are in ``algorithms._multi_agent``; the clipped surrogate, GAE, the epoch loop and value
normalisation are ``msrl.rl``'s.  Written against msrl's public API alone, so every distribution
policy runs it as is.

* Actors are decentralised: each agent acts on its own observation.  Agents of one group share
  a policy; several groups share one when ``policies`` maps them to the same name (their spaces
  must then match), or all agents share one when ``policies`` is empty.
* The critic is *centralised* for MAPPO: it sees the environment's global state, the
  concatenated observations of every agent, beside the agent's own observation (the paper's
  "agent-specific global state").  IPPO's critic sees the agent's own observation only, which is
  what scales to thousands of agents per environment.
* Every agent's transition is a PPO sample: rewards are per agent, GAE runs per agent, the loss
  averages over all agents in the game of all groups.  Minibatches are drawn over (step,
  environment) rows, so the centralised critic always sees a whole environment.
* As the paper runs it (its code's defaults, ``marlbenchmark/on-policy``): value normalisation
  (``value_norm``), active masks (``active_masks``: agents out of the game leave the losses; the
  environment says who is in through an optional ``active()`` method), a Huber value loss
  (``huber_delta`` 10) clipped around the rollout's values (``clip_value_loss``), the policies'
  and the critics' gradients clipped to 10 each; its ``MLPBase`` LayerNorms are ``layer_norm``
  (off by default); its recurrent rMAPPO, which its MPE scripts run, is ``recurrent`` (a GRU in
  each policy and critic, replayed in chunks of ``chunk_length`` steps; off by default).  One Adam
  over both networks at one learning rate stands in for its two optimisers at the same rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import msrl.envs
from algorithms._multi_agent import (
    Agents,
    MAPPOLearner,
    MultiAgentActor,
    MultiAgentBuffer,
    RecurrentMultiAgentActor,
)
from msrl.core import (
    AgentGroup,
    Algorithm,
    Box,
    ConfigError,
    Discrete,
    RunInfo,
    check_unit_interval,
    component_class,
    split,
    steps,
)
from msrl.rl import check_action_space, check_activation, check_compile_option, observation_shape

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
    activation: str = "tanh"
    """Hidden-layer activation, ``tanh`` or ``relu``.  The paper's MPE scripts pass ``--use_ReLU``,
    which its ``config.py`` declares ``store_false`` (default on): passing it selects ``tanh``."""
    layer_norm: bool = False
    """LayerNorm on each network's input and after each hidden layer (the paper's ``MLPBase``; with
    ``tanh``, its MPE network less the GRU)."""
    recurrent: bool = False
    """A GRU in every policy and critic after its hidden layers (the paper's rMAPPO, which its MPE
    scripts run; with ``layer_norm``, its networks): agents remember across an episode's steps."""
    chunk_length: int = 10
    """With ``recurrent``: steps the learner replays from a stored memory, so gradients flow back
    through at most this many (the paper's ``data_chunk_length``).  Minibatches are then drawn
    over whole environments, so ``num_minibatches`` must divide ``num_envs``."""
    value_norm: bool = True
    """Train each critic on value targets standardised by running statistics (the paper's
    ValueNorm, ``msrl.rl.ValueNorm``) and denormalise its outputs for GAE."""
    active_masks: bool = True
    """Leave agents out of the game out of the losses, where the environment says who is in
    (an ``active()`` method); environments without one keep every agent in."""
    huber_delta: float = 10.0
    """Huber loss threshold of the value loss (the paper's 10); 0 for half the squared error."""
    clip_value_loss: bool = True
    """Clip the value prediction to ``clip_coef`` around the rollout's and take the larger loss."""
    bootstrap_time_limits: bool = False
    """Bootstrap the return of an episode cut off by its time limit from the value of its last
    state (msrl's single-agent rule).  Off, as the paper runs MPE (its ``use_proper_time_limits``):
    the end of an episode is terminal, so values are returns to the end of the episode."""
    compile: bool | str = "auto"
    """Each minibatch's gradient step as one compiled region: ``auto`` switches to it once built,
    ``true`` waits for it, ``false``: eager.  Recurrent policies' steps run eagerly."""

    @property
    def rows(self) -> int:
        return self.num_envs * self.num_steps

    def validate(self) -> None:
        check_unit_interval(self, "gamma", "gae_lambda")
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden_size", "chunk_length"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        if self.critic not in ("centralised", "decentralised"):
            raise ConfigError(f"algo.critic must be centralised (MAPPO) or decentralised (IPPO), got {self.critic!r}")
        if self.recurrent and self.num_envs % self.num_minibatches:
            raise ConfigError(
                f"algo.num_minibatches ({self.num_minibatches}) must divide num_envs ({self.num_envs}) with "
                "algo.recurrent: minibatches are whole environments"
            )
        if self.rows % self.num_minibatches:
            raise ConfigError(
                f"algo.num_minibatches ({self.num_minibatches}) must divide num_envs*num_steps ({self.rows})"
            )
        if self.learning_rate <= 0:
            raise ConfigError(f"algo.learning_rate must be > 0, got {self.learning_rate}")
        check_activation(self.activation)
        check_compile_option(self.compile)
        if self.huber_delta < 0:
            raise ConfigError(f"algo.huber_delta must be >= 0 (0: squared error), got {self.huber_delta}")
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
                spaces = "; ".join(
                    f"{group!r}: {groups[group].observation_space} observations, {groups[group].action_space} actions"
                    for group in (members[0], g)
                )
                raise ConfigError(
                    f"groups {members[0]!r} and {g!r} of {env_id} have different spaces ({spaces}) and cannot "
                    f"share policy {name!r}; map them to different names in algo.policies, e.g. "
                    f"algo.policies={{{members[0]}: {members[0]}, {g}: {g}}}"
                )
    return mapping


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

        def make_agents() -> Agents:
            net = {"activation": config.activation, "layer_norm": config.layer_norm}
            size, norm = config.hidden_size, config.value_norm
            return Agents(spec.groups, mapping, central, size, run, norm, config.recurrent, **net)

        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        # Active masks where the environment says which agents are in the game (a constant here,
        # so the traced graph has no active() calls otherwise).
        self.masked = config.active_masks and callable(getattr(component_class(self.env), "active", None))
        self.recurrent = config.recurrent  # a constant, as self.masked
        actor = RecurrentMultiAgentActor if self.recurrent else MultiAgentActor
        self.actor: Any = actor(make_agents(), run)  # the recurrent one's act also returns the memories
        self.buffer = MultiAgentBuffer(
            config.num_steps,
            config.num_envs,
            spec.groups,
            config.gamma,
            config.gae_lambda,
            run.device,
            config.bootstrap_time_limits,
            config.hidden_size if self.recurrent else 0,
        )
        self.learner = MAPPOLearner(make_agents(), config, run)

    def train_step(self) -> dict:
        # Rollout: every agent of every environment acts num_steps times with the current policies.
        obs = self.env.observe()
        if self.masked:
            active = self.env.active()
        for _ in steps(self.config.num_steps):
            # Recurrent policies also say what each agent remembered before it acted (the learner
            # replays from there) and forget the episodes that end.
            if self.recurrent:
                actions, logprobs, values, memory = self.actor.act(obs)
            else:
                actions, logprobs, values = self.actor.act(obs)
                memory = None
            next_obs, rewards, terminated, truncated = self.env.step(actions)
            if self.recurrent:
                self.actor.forget(terminated, truncated)
            step = (obs, actions, logprobs, values, rewards, terminated, truncated)
            if self.masked:  # who was in the game before the step and who is after it
                next_active = self.env.active()
                self.buffer.insert(*step, active, next_active, memory=memory)
                active = next_active
            else:
                self.buffer.insert(*step, memory=memory)
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
