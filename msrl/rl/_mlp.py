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
