"""What algorithms ask of an environment's action space: whether they support it, and how a buffer stores it."""

from __future__ import annotations

import torch

from msrl.core import Box, ConfigError, Space


def check_action_space(env_id: str, algorithm: str, space: Space, kinds: tuple[type, ...]) -> None:
    """One line naming what ``algorithm`` supports when ``env_id``'s actions are something else."""
    if not isinstance(space, kinds):
        names = " or ".join(kind.__name__ for kind in kinds)
        raise ConfigError(f"{algorithm} supports {names} actions; {env_id} has {type(space).__name__} actions")


def action_layout(space: Space) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape and dtype of one environment's action in a buffer: ``Box`` actions are float32 of the
    space's shape, ``Discrete`` ones int64 scalars."""
    if isinstance(space, Box):
        return tuple(space.shape), torch.float32
    return (), torch.int64
