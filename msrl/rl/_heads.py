"""Action distributions as network heads: categorical logits for ``Discrete`` actions, a diagonal
Gaussian with a state-independent log standard deviation for ``Box`` actions (as in the PPO paper's
MuJoCo experiments), and the tanh-squashed Gaussian of SAC.

Each head is an ``nn.Module`` that maps features to the distribution's parameters, plus the
operations an algorithm needs on those parameters: ``sample`` (with an explicit generator, so a
component's random stream is part of its checkpoint), ``log_prob``, ``entropy`` and ``mode`` (the
greedy action).  They compute the same numbers as ``torch.distributions`` (the tests compare them),
without its per-call validation and object construction, which dominate small-batch inference.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from msrl.rl._categorical import categorical_entropy, categorical_log_prob, categorical_noise, sample_categorical

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def orthogonal_weight_(weight: torch.Tensor, gain: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """``weight`` filled with an orthogonal matrix times ``gain``, drawn from ``generator`` with one
    thread so a seed gives the same weights on every machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # orthogonal_'s QR rounds differently with more threads
    try:
        with torch.no_grad():
            drawn = torch.empty_like(weight)
            nn.init.orthogonal_(drawn, gain, generator=generator)
            weight.copy_(drawn)
    finally:
        torch.set_num_threads(threads)
    return weight


def orthogonal_(layer: nn.Linear, gain: float, generator: torch.Generator | None = None) -> nn.Linear:
    """Orthogonal weights with ``gain`` and zero bias (the PPO paper's code and CleanRL's
    ``layer_init``), drawn from ``generator`` (``orthogonal_weight_``)."""
    orthogonal_weight_(layer.weight, gain, generator)
    with torch.no_grad():
        layer.bias.zero_()
    return layer


def default_init_(layer: nn.Linear, generator: torch.Generator | None = None) -> nn.Linear:
    """PyTorch's own ``nn.Linear`` initialisation (Kaiming-uniform weights, biases uniform in
    +-1/sqrt(fan_in)), drawn from ``generator``: what SB3's policies keep with ``ortho_init=False``."""
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        bound = 1 / math.sqrt(layer.in_features)
        layer.bias.uniform_(-bound, bound, generator=generator)
    return layer


def init_(layer: nn.Linear, gain: float | None, generator: torch.Generator | None = None) -> nn.Linear:
    """``orthogonal_`` with ``gain``, or with ``gain=None`` PyTorch's default (``default_init_``)."""
    return default_init_(layer, generator) if gain is None else orthogonal_(layer, gain, generator)


class CategoricalHead(nn.Module):
    """``features -> logits`` for ``n`` discrete actions."""

    def __init__(
        self, features: int, n: int, gain: float | None = 0.01, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        self.linear = init_(nn.Linear(features, n), gain, generator)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features)

    @staticmethod
    def sample(
        logits: torch.Tensor, generator: torch.Generator | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action, log_prob)``, from ``noise`` (what ``noise`` below draws) when given."""
        return sample_categorical(logits, generator, noise)

    noise = staticmethod(categorical_noise)
    """``noise(shape, generator, device, dtype)``: the draw ``sample`` makes for logits of ``shape``."""

    @staticmethod
    def log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return categorical_log_prob(logits, action)

    @staticmethod
    def entropy(logits: torch.Tensor) -> torch.Tensor:
        return categorical_entropy(logits)

    @staticmethod
    def mode(logits: torch.Tensor) -> torch.Tensor:
        return torch.argmax(logits, dim=-1)


def gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Log density of a diagonal Gaussian, summed over the last axis."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian, summed over the last axis."""
    return (log_std + 0.5 + _LOG_SQRT_2PI).sum(-1)


class GaussianHead(nn.Module):
    """``features -> (mean, log_std)`` for ``dim`` continuous actions; ``log_std`` is one learned
    parameter per action dimension, the same in every state."""

    def __init__(
        self,
        features: int,
        dim: int,
        gain: float | None = 0.01,
        log_std_init: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.linear = init_(nn.Linear(features, dim), gain, generator)
        self.log_std = nn.Parameter(torch.full((dim,), float(log_std_init)))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.linear(features)
        return mean, self.log_std.expand_as(mean)

    @staticmethod
    def sample(
        params: tuple[torch.Tensor, torch.Tensor],
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action, log_prob)``, from ``noise`` (what ``noise`` below draws) when given."""
        mean, log_std = params
        if noise is None:
            noise = GaussianHead.noise(mean.shape, generator, mean.device, mean.dtype)
        action = mean + noise * log_std.exp()
        return action, gaussian_log_prob(mean, log_std, action)

    @staticmethod
    def noise(
        shape: torch.Size | tuple[int, ...],
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """The standard normal draw ``sample`` makes for means of ``shape``."""
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    @staticmethod
    def log_prob(params: tuple[torch.Tensor, torch.Tensor], action: torch.Tensor) -> torch.Tensor:
        return gaussian_log_prob(params[0], params[1], action)

    @staticmethod
    def entropy(params: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return gaussian_entropy(params[1])

    @staticmethod
    def mode(params: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return params[0]


def sample_tanh_gaussian(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised sample ``tanh(mean + std * noise)`` in (-1, 1) and its log density (SAC,
    Haarnoja et al. 2018, appendix C): the Gaussian's, minus ``log(1 - tanh(u)^2)`` per dimension,
    written as ``2 (log 2 - u - softplus(-2u))`` which stays finite where tanh saturates.  ``noise``
    (standard normal, ``mean``'s shape) is drawn from ``generator`` unless given: a compiled
    region takes it drawn outside, as the eager path would draw it."""
    if noise is None:
        noise = GaussianHead.noise(mean.shape, generator, mean.device, mean.dtype)
    u = mean + noise * log_std.exp()
    correction = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    return torch.tanh(u), gaussian_log_prob(mean, log_std, u) - correction.sum(-1)


__all__ = [
    "CategoricalHead",
    "GaussianHead",
    "gaussian_entropy",
    "gaussian_log_prob",
    "orthogonal_",
    "sample_tanh_gaussian",
]
