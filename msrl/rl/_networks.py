"""The networks an algorithm's config chooses by name (``algo.network``): ``mlp`` (the algorithm's
own multilayer perceptron), ``nature_cnn`` (Mnih et al. 2015), ``impala_cnn`` (Espeholt et al.
2018's 15-layer residual network), or a user's own torso as ``"module:Class"``.

A convolutional network takes frames as the environment gives them, ``(channels, height, width)``
uint8, and scales them to [0, 1] itself (by the observation space's ``high``), so frames stay one
byte per pixel in rollouts, replay and on cut edges.  Its convolutions run channels last (weights
and activations), the layout the fast CPU and GPU kernels take.  Layers are initialised orthogonally (gain
sqrt(2)) from the component's seed, as CleanRL's Atari agents are; the heads go on top:
``SharedActorCritic`` (a policy and a value head on one torso, CleanRL's Atari agent) for the
actor-critic algorithms, a linear Q head for DQN (``q_head``).

A user's torso: ``algo.network: my_package.nets:Encoder`` names an ``nn.Module`` class built as
``Encoder(obs_shape)`` (torch's global generator seeded from the component's seed around the call,
so a seed gives the same weights), mapping a batch of observations as the environment gives them to
``(batch, features)``; msrl reads ``features`` from one forward pass of a zero observation.
The torso's input is what the environment gives: uint8 frames are the module's to scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from msrl.core import Box, ConfigError, Space, import_object
from msrl.rl._actor_critic import ActorCritic, action_head
from msrl.rl._heads import init_, orthogonal_weight_

NETWORKS = ("mlp", "nature_cnn", "impala_cnn")
"""The networks ``algo.network`` names (besides ``"module:Class"``)."""
_SMALLEST_FRAME = {"nature_cnn": 36, "impala_cnn": 1}
"""The smallest height and width each convolutional network takes: Nature-CNN's three valid
convolutions (8/4, 4/2, 3/1) leave nothing of a frame under 36 pixels."""


def _conv(conv: nn.Conv2d, generator: torch.Generator | None) -> nn.Conv2d:
    orthogonal_weight_(conv.weight, 2**0.5, generator)
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv


def _scale(space: Box) -> float:
    """What multiplies an observation to bring it into [0, 1]: ``1 / high`` for integer frames."""
    high = float(torch.as_tensor(space.high, dtype=torch.float64).max())
    return 1.0 / high if str(space.dtype).startswith("uint") and high > 0 else 1.0


def _channels_last_(module: nn.Module) -> None:
    """``module``'s convolution weights stored channels last (what ``Module.to(memory_format=)`` does)."""
    for param in module.parameters():
        if param.dim() == 4:
            param.data = param.data.contiguous(memory_format=torch.channels_last)


def _pixels(obs: torch.Tensor, scale: float) -> torch.Tensor:
    """Frames as the convolutions take them: channels last (the memory order oneDNN's CPU kernels and
    cuDNN's tensor cores run fastest on: BENCHMARKS.md, "How fast does msrl train from pixels?"),
    scaled to [0, 1] in float32.  The layout changes on the uint8 frames, a quarter of the bytes of
    the float ones."""
    return obs.contiguous(memory_format=torch.channels_last).float() * scale


class NatureCNN(nn.Module):
    """Three convolutions (32 8x8/4, 64 4x4/2, 64 3x3/1) and a 512-unit layer, ReLU throughout."""

    out_features = 512

    def __init__(self, obs_shape: tuple[int, ...], scale: float = 1 / 255, generator: torch.Generator | None = None):
        super().__init__()
        channels, height, width = obs_shape
        self.scale = scale
        self.convs = nn.Sequential(
            _conv(nn.Conv2d(channels, 32, 8, stride=4), generator),
            nn.ReLU(),
            _conv(nn.Conv2d(32, 64, 4, stride=2), generator),
            nn.ReLU(),
            _conv(nn.Conv2d(64, 64, 3, stride=1), generator),
            nn.ReLU(),
            nn.Flatten(),
        )
        size = lambda n: ((n - 8) // 4 + 1 - 4) // 2 + 1 - 2  # noqa: E731 - the three valid convolutions
        self.linear = init_(nn.Linear(64 * size(height) * size(width), self.out_features), 2**0.5, generator)
        _channels_last_(self)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(self.convs(_pixels(obs, self.scale))))


class _Residual(nn.Module):
    def __init__(self, channels: int, generator: torch.Generator | None) -> None:
        super().__init__()
        self.conv0 = _conv(nn.Conv2d(channels, channels, 3, padding=1), generator)
        self.conv1 = _conv(nn.Conv2d(channels, channels, 3, padding=1), generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaCNN(nn.Module):
    """IMPALA's deep torso: three stacks (16, 32, 32 channels) of a 3x3 convolution, a 3x3/2 max
    pool and two residual blocks, then a 256-unit layer, ReLU throughout (15 layers)."""

    out_features = 256

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        scale: float = 1 / 255,
        generator: torch.Generator | None = None,
        channels: tuple[int, ...] = (16, 32, 32),
    ):
        super().__init__()
        depth, height, width = obs_shape
        self.scale = scale
        layers: list[nn.Module] = []
        for out in channels:
            layers += [
                _conv(nn.Conv2d(depth, out, 3, padding=1), generator),
                nn.MaxPool2d(3, stride=2, padding=1),
                _Residual(out, generator),
                _Residual(out, generator),
            ]
            depth, height, width = out, (height + 1) // 2, (width + 1) // 2
        self.stacks = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        self.linear = init_(nn.Linear(depth * height * width, self.out_features), 2**0.5, generator)
        _channels_last_(self)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(self.stacks(_pixels(obs, self.scale))))


def check_network(name: Any, env_id: str, space: Space | None, key: str = "algo.network") -> None:
    """One line naming the choices unless ``name`` is a network ``space``'s observations fit: a
    convolutional one needs ``(channels, height, width)`` frames at least its smallest size, an
    ``mlp`` vector (one-axis, float) observations."""
    if not isinstance(name, str) or (name not in NETWORKS and ":" not in name):
        raise ConfigError(f"{key} must be one of: {', '.join(NETWORKS)}, or 'module:Class'; got {name!r}")
    if not isinstance(space, Box):
        return  # the algorithm refuses other spaces itself
    shape = tuple(space.shape)
    if name == "mlp":
        if len(shape) != 1:
            raise ConfigError(
                f"{key} mlp takes vector observations; {env_id} has {shape} frames: use nature_cnn or impala_cnn"
            )
    elif name in _SMALLEST_FRAME:
        smallest = _SMALLEST_FRAME[name]
        if len(shape) != 3:
            raise ConfigError(
                f"{key} {name} takes (channels, height, width) frames; {env_id} has {shape} observations: use mlp"
            )
        if min(shape[1:]) < smallest:
            fits = [n for n, least in _SMALLEST_FRAME.items() if min(shape[1:]) >= least]
            raise ConfigError(
                f"{key} {name} takes frames of at least {smallest}x{smallest}; {env_id} has {shape[1]}x{shape[2]}: "
                f"use {' or '.join(fits)}"
            )


def torso(name: str, space: Box, generator: torch.Generator, seed: int) -> tuple[nn.Module, int]:
    """The convolutional (or user's) torso ``name`` for observations of ``space``, and the width of
    its features."""
    shape = tuple(space.shape)
    if name == "nature_cnn":
        return NatureCNN(shape, _scale(space), generator), NatureCNN.out_features
    if name == "impala_cnn":
        return ImpalaCNN(shape, _scale(space), generator), ImpalaCNN.out_features
    return _user_torso(name, space, seed)


def _user_torso(path: str, space: Box, seed: int) -> tuple[nn.Module, int]:
    cls = import_object(path, "algo.network")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = cls(tuple(space.shape))
    if not isinstance(module, nn.Module):
        raise ConfigError(f"algo.network {path} built a {type(module).__name__}, not a torch nn.Module")
    zero = torch.zeros((1, *space.shape), dtype=getattr(torch, str(space.dtype)))
    with torch.no_grad():
        out = module(zero)
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 1:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(f"algo.network {path} must map (batch, *obs) to (batch, features); gave {got} for one row")
    return module, int(out.shape[1])


class SharedActorCritic(nn.Module):
    """A policy head and a value head on one torso (CleanRL's Atari agent): the interface of
    ``ActorCritic`` (``forward(obs) -> (dist_params, value)``, ``policy``, ``value``, ``head``)."""

    def __init__(self, body: nn.Module, features: int, head: nn.Module, generator: torch.Generator) -> None:
        super().__init__()
        self.torso = body
        self.head = head
        self.critic = init_(nn.Linear(features, 1), 1.0, generator)

    def forward(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        features = self.torso(obs)
        return self.head(features), self.critic(features).squeeze(-1)

    def policy(self, obs: torch.Tensor) -> Any:
        return self.head(self.torso(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.torso(obs)).squeeze(-1)


def actor_critic(
    network: str, space: Space | None, action_space: Space, seed: int, mlp: Callable[[], ActorCritic]
) -> ActorCritic | SharedActorCritic:
    """The actor-critic ``network`` names for observations of ``space``: ``mlp()`` (the algorithm's
    own ``ActorCritic``), else a ``SharedActorCritic`` on that torso, drawn from ``seed`` (torso,
    policy head, value head, in that order)."""
    if network == "mlp":
        return mlp()
    generator = torch.Generator().manual_seed(seed)
    body, features = torso(network, _frames(network, space), generator, seed)
    return SharedActorCritic(body, features, action_head(features, action_space, generator), generator)


def q_network(
    network: str,
    space: Space | None,
    num_actions: int,
    seed: int,
    mlp: Callable[[], nn.Module],
    dueling: Callable[[], tuple[nn.Module, int]] | None = None,
    atoms: int = 1,
) -> nn.Module:
    """The Q-network ``network`` names: ``mlp()`` (the algorithm's own), else that torso and a
    linear layer to one value per action (``q_head``).  With ``dueling``, the torso and a dueling
    head (``DuelingQ``) instead, ``dueling()`` giving the algorithm's MLP torso and its width.
    ``atoms`` above 1: each action's ``atoms`` logits of a return distribution (``CategoricalQ``
    wraps the network; ``mlp()`` must then give ``num_actions * atoms`` outputs)."""
    generator = torch.Generator().manual_seed(seed)
    if dueling is not None:
        body, features = dueling() if network == "mlp" else torso(network, _frames(network, space), generator, seed)
        return DuelingQ(body, features, num_actions, generator, atoms)
    if network == "mlp":
        return mlp()
    body, features = torso(network, _frames(network, space), generator, seed)
    return q_head(body, features, num_actions * atoms, generator)


class DuelingQ(nn.Module):
    """Wang et al.'s (2016) dueling architecture: one torso, a state value ``V(s)`` and each
    action's advantage ``A(s, a)``, combined as ``Q = V + A - mean_a A`` (the mean keeps ``V`` and
    ``A`` identifiable, as the paper's).  With ``atoms`` above 1, the same per atom of a return
    distribution's logits (Rainbow's dueling distributional head), flattened to ``num_actions * atoms``."""

    def __init__(
        self, body: nn.Module, features: int, num_actions: int, generator: torch.Generator, atoms: int = 1
    ) -> None:
        super().__init__()
        self.body, self.num_actions, self.atoms = body, num_actions, atoms
        self.value = _linear(features, atoms, generator)
        self.advantage = _linear(features, num_actions * atoms, generator)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.body(obs)
        advantage = self.advantage(features).reshape(-1, self.num_actions, self.atoms)
        value = self.value(features).reshape(-1, 1, self.atoms)
        return (value + advantage - advantage.mean(1, keepdim=True)).reshape(-1, self.num_actions * self.atoms)


class CategoricalQ(nn.Module):
    """A return distribution per action on ``atoms`` fixed values from ``v_min`` to ``v_max``
    (Bellemare et al.'s C51): ``net`` gives ``num_actions * atoms`` logits; ``forward`` is each
    action's expected return (what acting and the greedy policy read), ``logits`` the distributions'."""

    support: torch.Tensor  # a buffer (registered in __init__): the atoms' values

    def __init__(self, net: nn.Module, num_actions: int, atoms: int, v_min: float, v_max: float) -> None:
        super().__init__()
        self.net, self.num_actions, self.atoms = net, num_actions, atoms
        self.register_buffer("support", torch.linspace(v_min, v_max, atoms))

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).reshape(-1, self.num_actions, self.atoms)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.logits(obs).softmax(-1) * self.support).sum(-1)


def categorical_projection(
    probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """C51's target: the distribution ``probs`` (``(batch, atoms)`` on ``support``) moved to
    ``rewards + discounts * z``, clipped to the support's ends and split between the two atoms
    around each moved value in proportion to its distance from them."""
    v_min, v_max, atoms = support[0], support[-1], support.numel()
    delta = (v_max - v_min) / (atoms - 1)
    moved = (rewards.unsqueeze(-1) + discounts.unsqueeze(-1) * support).clamp(v_min, v_max)
    position = (moved - v_min) / delta
    lower, upper = position.floor(), position.ceil()
    target = torch.zeros_like(probs)
    # a value on an atom (lower == upper) goes whole to it
    target.scatter_add_(-1, lower.long(), probs * (upper - position + (lower == upper).to(probs.dtype)))
    target.scatter_add_(-1, upper.long(), probs * (position - lower))
    return target


def _linear(inputs: int, outputs: int, generator: torch.Generator) -> nn.Linear:
    """``nn.Linear`` with PyTorch's initialisation, drawn from ``generator``."""
    layer = nn.Linear(inputs, outputs)
    with torch.no_grad():
        bound = 1.0 / math.sqrt(inputs)
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        layer.bias.uniform_(-bound, bound, generator=generator)
    return layer


def _frames(network: str, space: Space | None) -> Box:
    if not isinstance(space, Box):
        raise ConfigError(f"algo.network {network} needs the environment's Box observation space, got {space!r}")
    return space


def q_head(body: nn.Module, features: int, num_actions: int, generator: torch.Generator) -> nn.Sequential:
    """``body`` then a linear layer to one value per action (PyTorch's initialisation, drawn from
    ``generator``: CleanRL's ``dqn_atari`` Q-network keeps torch's defaults)."""
    return nn.Sequential(body, _linear(features, num_actions, generator))


__all__ = [
    "NETWORKS",
    "CategoricalQ",
    "DuelingQ",
    "categorical_projection",
    "ImpalaCNN",
    "NatureCNN",
    "SharedActorCritic",
    "actor_critic",
    "check_network",
    "q_head",
    "q_network",
    "torso",
]
