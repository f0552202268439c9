"""A recurrent actor-critic: the MAPPO paper's rMAPPO networks (its ``R_Actor`` and ``R_Critic``,
``marlbenchmark/on-policy``), which its MPE scripts train.

Each tower is two hidden layers (``msrl.rl.hidden_layers``, with ``layer_norm`` the paper's
``MLPBase``), one GRU cell and a ``LayerNorm`` on the GRU's output (its ``RNNLayer``), then the
action head or the value output.  The GRU's weights are orthogonal with gain 1 and its biases zero,
as the paper initialises them.

A *memory* is one ``(..., 2, hidden)`` tensor per agent: the actor's GRU state, then the critic's.
An actor steps it with ``step``; a learner replays a rollout with ``unroll`` from the memories the
actor had before each step, restarting from the stored memory every ``chunk`` steps (the paper's
``data_chunk_length``: gradients flow back through at most ``chunk`` steps) and from a blank one
where an episode began.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from msrl.core import Space
from msrl.rl._actor_critic import action_head, hidden_layers
from msrl.rl._heads import init_, orthogonal_weight_


class GRULayer(nn.Module):
    """One GRU layer over any leading dimensions and a ``LayerNorm`` on its output."""

    def __init__(self, size: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.size = size
        self.gru = nn.GRU(size, size, batch_first=True)
        self.norm = nn.LayerNorm(size)
        with torch.no_grad():
            for name in ("weight_ih_l0", "weight_hh_l0"):
                orthogonal_weight_(self.gru.get_parameter(name), 1.0, generator)
            for name in ("bias_ih_l0", "bias_hh_l0"):
                self.gru.get_parameter(name).zero_()

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``(features, new state)`` for input ``x`` and GRU state ``state``, both ``(..., size)``."""
        lead = x.shape[:-1]
        _, new = self.gru(x.reshape(-1, 1, self.size), state.reshape(1, -1, self.size))
        new = new.reshape(*lead, self.size)
        return self.norm(new), new

    def sequence(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps in a row: ``x`` is ``(rows, steps, size)``, ``state`` ``(rows, size)``; the GRU's
        outputs (before the ``LayerNorm``) and its last state."""
        out, last = self.gru(x, state.unsqueeze(0))
        return out, last.squeeze(0)


class RecurrentActorCritic(nn.Module):
    """Separate recurrent actor and critic towers; the critic's input may differ from the actor's
    (``critic_dim``: MAPPO's global state and observation).  Drawn from ``seed`` in a fixed order:
    the critic's layers, its GRU, its output, then the actor's layers, its GRU, the head."""

    def __init__(
        self,
        obs_dim: int,
        action_space: Space,
        hidden: int = 64,
        seed: int = 0,
        critic_dim: int | None = None,
        activation: str = "tanh",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        tower = (hidden, activation, layer_norm, generator)
        self.hidden = hidden
        self.critic_base = nn.Sequential(*hidden_layers(obs_dim if critic_dim is None else critic_dim, *tower))
        self.critic_rnn = GRULayer(hidden, generator)
        self.critic_out = init_(nn.Linear(hidden, 1), 1.0, generator)
        self.torso = nn.Sequential(*hidden_layers(obs_dim, *tower))
        self.actor_rnn = GRULayer(hidden, generator)
        self.head = action_head(hidden, action_space, generator)

    def blank_memory(self, lead: tuple[int, ...], device: torch.device | str = "cpu") -> torch.Tensor:
        """Zeros of shape ``lead + (2, hidden)``: what an agent remembers at an episode's start."""
        return torch.zeros(*lead, 2, self.hidden, device=device)

    def features(
        self, obs: torch.Tensor, critic_in: torch.Tensor, memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of both towers: the actor's features, the critic's, and the new memory."""
        actor, actor_state = self.actor_rnn(self.torso(obs), memory[..., 0, :])
        critic, critic_state = self.critic_rnn(self.critic_base(critic_in), memory[..., 1, :])
        return actor, critic, torch.stack((actor_state, critic_state), dim=-2)

    def step(
        self, obs: torch.Tensor, critic_in: torch.Tensor, memory: torch.Tensor
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """``(dist_params, value, new memory)`` for one step of ``(..., obs_dim)`` observations."""
        actor, critic, memory = self.features(obs, critic_in, memory)
        return self.head(actor), self.critic_out(critic).squeeze(-1), memory

    def unroll(
        self, obs: torch.Tensor, critic_in: torch.Tensor, memory: torch.Tensor, first: torch.Tensor, chunk: int
    ) -> tuple[Any, torch.Tensor]:
        """``(dist_params, values)`` of a rollout, ``(n, steps, ...)`` each.

        ``memory`` is ``(n, steps, ..., 2, hidden)``, what the actor remembered before each step;
        ``first`` is ``(n, steps)``, 1 where an episode began at that step.  Steps ``0, chunk,
        2 chunk, ...`` start from the stored memory (no gradient flows into it); the others carry
        on from the step before, blank where an episode began.  The hidden layers run on every
        step at once, the GRUs over the stretches between those restarts."""
        steps = obs.shape[1]
        restarts = set(range(0, steps, chunk)) | set(first.any(0).nonzero().flatten().tolist())
        bounds = sorted(restarts) + [steps]
        actor = self._replay(self.actor_rnn, self.torso(obs), memory[..., 0, :], first, chunk, bounds)
        critic = self._replay(self.critic_rnn, self.critic_base(critic_in), memory[..., 1, :], first, chunk, bounds)
        return self.head(actor), self.critic_out(critic).squeeze(-1)

    @staticmethod
    def _replay(
        rnn: GRULayer, x: torch.Tensor, memory: torch.Tensor, first: torch.Tensor, chunk: int, bounds: list[int]
    ) -> torch.Tensor:
        """``rnn`` over ``x`` (``(n, steps, ..., hidden)``) stretch by stretch, normalised."""
        n, steps, size = x.shape[0], x.shape[1], x.shape[-1]
        middle = x.shape[2:-1]

        def rows(t: torch.Tensor) -> torch.Tensor:  # (n, steps, ..., k) -> (n * ..., steps, k)
            return t.movedim(1, -2).reshape(-1, steps, t.shape[-1])

        inputs, stored = rows(x), rows(memory)
        carry = rows(first.reshape(n, steps, *(1,) * len(middle), 1).expand(*x.shape[:-1], 1))
        outputs, state = [], stored[:, 0]
        for start, end in zip(bounds[:-1], bounds[1:]):
            state = stored[:, start] if start % chunk == 0 else state * (1.0 - carry[:, start])
            out, state = rnn.sequence(inputs[:, start:end], state)
            outputs.append(out)
        out = torch.cat(outputs, dim=1).reshape(n, *middle, steps, size).movedim(-2, 1)
        return rnn.norm(out)
