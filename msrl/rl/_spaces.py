"""What algorithms ask of an environment's spaces: whether they support its actions, how a buffer
stores them, and the shape of its observations."""

from __future__ import annotations

from typing import TypeVar

import torch

from msrl.core import Box, ConfigError, Space

S = TypeVar("S", bound=Space)


def check_action_space(env_id: str, algorithm: str, space: Space | None, kinds: tuple[type[S], ...]) -> S:
    """``space`` itself when ``algorithm`` supports it; else one line naming what ``algorithm``
    supports and what ``env_id`` has (a multi-agent environment has no single action space)."""
    if not isinstance(space, kinds):
        names = " or ".join(kind.__name__ for kind in kinds)
        has = "per-group (multi-agent)" if space is None else type(space).__name__
        raise ConfigError(f"{algorithm} supports {names} actions; {env_id} has {has} actions")
    return space


def observation_shape(env_id: str, space: Space | None) -> tuple[int, ...]:
    """The shape of one observation: algorithms take ``Box`` observations (flattened for their MLPs)."""
    if not isinstance(space, Box):
        has = "per-group (multi-agent)" if space is None else type(space).__name__
        raise ConfigError(f"msrl's algorithms take Box observations; {env_id} has {has} observations")
    return tuple(space.shape)


def observation_dtype(space: Space | None) -> torch.dtype:
    """The dtype a buffer keeps observations of ``space`` in: uint8 frames as they are (a quarter of
    float32's bytes; the network scales them), everything else float32."""
    return torch.uint8 if isinstance(space, Box) and str(space.dtype) == "uint8" else torch.float32


def action_layout(space: Space) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape and dtype of one environment's action in a buffer: ``Box`` actions are float32 of the
    space's shape, ``Discrete`` ones int64 scalars."""
    if isinstance(space, Box):
        return tuple(space.shape), torch.float32
    return (), torch.int64
