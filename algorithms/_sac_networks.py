"""SAC's networks: the tanh-squashed Gaussian policy, the twin Q-networks and the entropy
temperature (``algorithms.sac`` holds the config, the components and the algorithm)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from msrl.core import Box
from msrl.rl import mlp, sample_tanh_gaussian

LOG_STD_HEADS = {"tanh": (-5.0, 2.0), "clamp": (-20.0, 2.0)}
"""The log-std heads ``algo.log_std_head`` chooses from, and their bounds: ``tanh`` squashes the
layer's output smoothly into [-5, 2] (CleanRL's ``sac_continuous_action.py``; it starts near
log-std -1.5, a standard deviation of about 0.22), ``clamp`` clips it to [-20, 2] (SB3's and the
authors' softlearning; it starts near 0, a standard deviation of about 1)."""


class SquashedGaussianPolicy(nn.Module):
    """Observation -> tanh-squashed Gaussian over actions, rescaled to the action bounds."""

    scale: torch.Tensor  # buffers (registered in __init__): half the action range, and its centre
    bias: torch.Tensor

    def __init__(
        self, obs_dim: int, action_space: Box, hidden: tuple, generator: torch.Generator, log_std_head: str = "tanh"
    ) -> None:
        super().__init__()
        dim = int(np.prod(action_space.shape))
        self.squash = log_std_head == "tanh"
        self.log_std_min, self.log_std_max = LOG_STD_HEADS[log_std_head]
        self.torso = mlp([obs_dim, *hidden], nn.ReLU, generator)
        self.torso.append(nn.ReLU())
        self.mean = mlp([hidden[-1], dim], generator=generator)
        self.log_std = mlp([hidden[-1], dim], generator=generator)
        low = np.broadcast_to(np.asarray(action_space.low, dtype=np.float32), (dim,))
        high = np.broadcast_to(np.asarray(action_space.high, dtype=np.float32), (dim,))
        self.register_buffer("scale", torch.as_tensor((high - low) / 2.0))
        self.register_buffer("bias", torch.as_tensor((high + low) / 2.0))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(obs)
        log_std = self.log_std(features)
        if not self.squash:
            return self.mean(features), log_std.clamp(self.log_std_min, self.log_std_max)
        span = self.log_std_max - self.log_std_min
        return self.mean(features), self.log_std_min + 0.5 * span * (torch.tanh(log_std) + 1)

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in the env's bounds, and its log density in the policy's own
        (-1, 1) units, before the rescaling to the bounds (``noise``: drawn unless given).

        The density is the squashed Gaussian's, as the SAC authors' softlearning and SB3 compute it
        (both act in a [-1, 1] action space and rescale outside the policy): the target entropy
        -dim(A) then means the same for every env, whatever its action units.  (Taken in the env's
        units, as CleanRL does, it would lie ``sum(log(scale))`` lower: -1.69 rather than -1 per
        dimension on Pendulum's [-2, 2].)  Besides a constant in the soft Q-values, the offset
        moves only the temperature's target."""
        mean, log_std = self(obs)
        squashed, logprob = sample_tanh_gaussian(mean, log_std, generator, noise)
        return squashed * self.scale + self.bias, logprob

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0]) * self.scale + self.bias


class TwinQ(nn.Module):
    """Two independent Q(s, a) networks."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple, generator: torch.Generator) -> None:
        super().__init__()
        self.q1 = mlp([obs_dim + action_dim, *hidden, 1], nn.ReLU, generator)
        self.q2 = mlp([obs_dim + action_dim, *hidden, 1], nn.ReLU, generator)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat((obs, action.reshape(obs.shape[0], -1)), -1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class Temperature(nn.Module):
    """The entropy temperature, ``log_alpha``, as a module's one parameter: its Adam step then
    compiles as the networks' do (``msrl.rl.GradientStep``), and checkpoints hold it as the
    tensor they always held."""

    def __init__(self, alpha: float, autotune: bool) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(np.log(alpha))), requires_grad=autotune)
