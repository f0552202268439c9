"""A plain multilayer perceptron with seeded initialisation."""

from __future__ import annotations

import math

import torch
from torch import nn


def mlp(
    sizes: list[int] | tuple[int, ...], activation: type[nn.Module] = nn.ReLU, generator: torch.Generator | None = None
) -> nn.Sequential:
    """``Linear`` layers of ``sizes`` (input first, output last) with ``activation`` between them,
    initialised as ``nn.Linear`` does by default (uniform, bound ``1/sqrt(fan_in)``) but drawn from
    ``generator``, so a component's seed fixes its weights without touching torch's global RNG."""
    layers: list[nn.Module] = []
    for index, (inputs, outputs) in enumerate(zip(sizes[:-1], sizes[1:])):
        layer = nn.Linear(inputs, outputs)
        bound = 1.0 / math.sqrt(inputs)
        with torch.no_grad():
            layer.weight.uniform_(-bound, bound, generator=generator)
            layer.bias.uniform_(-bound, bound, generator=generator)
        layers.append(layer)
        if index < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class QFunctions(nn.Module):
    """``count`` independent action-value MLPs ``Q(s, a)`` (``q1``, ``q2``, ...), each
    ``[obs_dim + action_dim, *hidden, 1]`` with ReLU between, drawn from ``generator`` in order:
    the critics of DDPG (one), TD3 and SAC (two, whose minimum is the clipped double-Q target).
    ``forward(obs, action)`` returns each one's values, ``(batch,)`` apiece."""

    def __init__(
        self, obs_dim: int, action_dim: int, hidden: tuple | list, generator: torch.Generator, count: int = 2
    ) -> None:
        super().__init__()
        self.count = count
        for index in range(count):
            self.add_module(f"q{index + 1}", mlp([obs_dim + action_dim, *hidden, 1], nn.ReLU, generator))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = torch.cat((obs, action.reshape(obs.shape[0], -1)), -1)
        return tuple(getattr(self, f"q{index + 1}")(x).squeeze(-1) for index in range(self.count))
