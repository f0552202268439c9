"""MAPPO's and IPPO's networks: every policy of a run, one per name in ``algo.policies``, each an
actor on the agent's observation and a critic on what its critic sees, feed-forward
(``msrl.rl.ActorCritic``) or recurrent (``msrl.rl.RecurrentActorCritic``, the paper's rMAPPO), and
with ``value_norm`` each policy's value statistics (``msrl.rl.ValueNorm``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from msrl.core import AgentGroup, RunInfo
from msrl.rl import (
    ActorCritic,
    CategoricalHead,
    GaussianHead,
    RecurrentActorCritic,
    ValueNorm,
    observation_shape,
)


class Agents(nn.Module):
    """Every policy of the run, how each group's observations reach its actor and critic, and (with
    ``value_norm``) each policy's value statistics.  With ``recurrent`` every policy is a
    ``RecurrentActorCritic``: ``step`` acts for one step from the agents' memories and ``unroll``
    replays a rollout; ``values``/``predictions`` are the feed-forward policies' alone."""

    def __init__(
        self,
        groups: Mapping[str, AgentGroup],
        mapping: dict[str, str],
        central: bool,
        hidden: int,
        run: RunInfo,
        value_norm: bool = False,
        recurrent: bool = False,
        **net_options: Any,  # the networks' activation, layer_norm
    ) -> None:
        super().__init__()
        self.groups, self.mapping, self.central, self.recurrent = list(groups), mapping, central, recurrent
        obs_dims = {g: int(np.prod(observation_shape(f"group {g!r}", groups[g].observation_space))) for g in groups}
        self.global_dim = sum(groups[g].num_agents * obs_dims[g] for g in groups) if central else 0
        self.nets = nn.ModuleDict()
        network = RecurrentActorCritic if recurrent else ActorCritic
        for index, name in enumerate(dict.fromkeys(mapping.values())):
            g = next(g for g in groups if mapping[g] == name)
            # one policy: actor on the agent's observation, critic on global state + observation
            seed, critic_dim = run.seed_for("weights", index), self.global_dim + obs_dims[g]
            self.nets[name] = network(
                obs_dims[g], groups[g].action_space, hidden, seed, critic_dim=critic_dim, **net_options
            )
        self.value_norms = nn.ModuleDict({name: ValueNorm() for name in self.nets} if value_norm else {})

    def net(self, group: str) -> ActorCritic:
        """The group's feed-forward policy (without ``recurrent``)."""
        net = self.nets[self.mapping[group]]
        if not isinstance(net, ActorCritic):
            raise TypeError(f"group {group!r} has a recurrent policy: use recurrent_net")
        return net

    def recurrent_net(self, group: str) -> RecurrentActorCritic:
        """The group's recurrent policy (with ``recurrent``)."""
        net = self.nets[self.mapping[group]]
        if not isinstance(net, RecurrentActorCritic):
            raise TypeError(f"group {group!r} has a feed-forward policy: use net")
        return net

    def head(self, group: str) -> CategoricalHead | GaussianHead:
        """The group's action head, whichever its policy's kind."""
        return cast(ActorCritic | RecurrentActorCritic, self.nets[self.mapping[group]]).head

    def value_norm(self, group: str) -> ValueNorm | None:
        name = self.mapping[group]
        return cast(ValueNorm, self.value_norms[name]) if name in self.value_norms else None

    def critic_inputs(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per group ``(..., agents, critic_dim)``: the observation, preceded for a centralised
        critic by the global state (every agent's observation, groups in order)."""
        if not self.central:
            return obs
        lead = next(iter(obs.values())).shape[:-2]
        state = torch.cat([obs[g].reshape(*lead, -1) for g in self.groups], dim=-1)
        return {g: torch.cat((state.unsqueeze(-2).expand(*o.shape[:-1], -1), o), dim=-1) for g, o in obs.items()}

    def predictions(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What each critic outputs: normalised values with ``value_norm``, else values."""
        return {g: self.net(g).value(x) for g, x in self.critic_inputs(obs).items()}

    def denormalize(self, predictions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Values in the rewards' units, for GAE, from what the critics output."""
        out = dict(predictions)
        for g, v in out.items():
            norm = self.value_norm(g)
            if norm is not None:
                out[g] = norm.denormalize(v)
        return out

    def values(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Values in the rewards' units, for GAE: the predictions, denormalised."""
        return self.denormalize(self.predictions(obs))

    def blank_memory(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per group ``(envs, agents, 2, hidden)`` zeros: the recurrent policies' start."""
        return {g: self.recurrent_net(g).blank_memory(tuple(o.shape[:2]), o.device) for g, o in obs.items()}

    def step(
        self, obs: dict[str, torch.Tensor], memory: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One recurrent step of every group: distribution parameters, what the critics output
        (normalised with ``value_norm``), and the new memories."""
        params, predictions, new = {}, {}, {}
        for g, x in self.critic_inputs(obs).items():
            params[g], predictions[g], new[g] = self.recurrent_net(g).step(obs[g], x, memory[g])
        return params, predictions, new

    def unroll(
        self, obs: dict[str, torch.Tensor], memory: dict[str, torch.Tensor], first: torch.Tensor, chunk: int
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """A rollout of every group replayed (``RecurrentActorCritic.unroll``): distribution
        parameters and critic outputs per group, ``(envs, steps, agents, ...)``."""
        params, predictions = {}, {}
        for g, x in self.critic_inputs(obs).items():
            params[g], predictions[g] = self.recurrent_net(g).unroll(obs[g], x, memory[g], first, chunk)
        return params, predictions

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """The policies' parameters and the critics' (each clipped to ``max_grad_norm`` on its own,
        as the MAPPO paper's separate actor and critic optimisers do)."""
        critics = [p for net in self.nets.values() for p in critic_parameters(net)]
        ids = {id(p) for p in critics}
        return [p for p in self.parameters() if id(p) not in ids], critics


def critic_parameters(net: nn.Module) -> list[nn.Parameter]:
    """The critic's parameters of an ``ActorCritic`` or a ``RecurrentActorCritic``."""
    if isinstance(net, RecurrentActorCritic):
        return [p for part in (net.critic_base, net.critic_rnn, net.critic_out) for p in part.parameters()]
    return list(cast(ActorCritic, net).critic.parameters())
