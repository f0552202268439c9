"""Minimal observation/action spaces, so msrl needs no gymnasium at run time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class Space:
    """Describes one environment's (or agent's) observation or action."""


@dataclass(frozen=True)
class Discrete(Space):
    """Actions ``0 .. n-1``."""

    n: int


@dataclass(frozen=True)
class Box(Space):
    """A real-valued array of ``shape`` with elementwise bounds."""

    low: float | np.ndarray
    high: float | np.ndarray
    shape: tuple[int, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class AgentGroup:
    """Agents of a multi-agent environment that share spaces (and, by default, a policy).

    A multi-agent environment has one or more groups (Tag: ``taggers`` and ``runners``;
    MPE ``simple_spread``: ``agents``).  Its values are dicts keyed by group name, each
    batched over environments then the group's agents: observations ``(num_envs,
    num_agents, *observation_space.shape)``, actions ``(num_envs, num_agents)`` for
    ``Discrete`` or ``(num_envs, num_agents, *shape)`` for ``Box``, rewards ``(num_envs,
    num_agents)``.  ``observation_space`` and ``action_space`` describe one agent."""

    name: str
    num_agents: int
    observation_space: Space
    action_space: Space
