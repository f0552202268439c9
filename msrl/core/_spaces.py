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

    def __str__(self) -> str:
        return f"Discrete({self.n})"


@dataclass(frozen=True, eq=False)
class Box(Space):
    """A real-valued array of ``shape`` with elementwise bounds.  Two are equal when their shapes,
    dtypes and bounds are (bounds given as a number or as an array of the shape compare alike)."""

    low: float | np.ndarray
    high: float | np.ndarray
    shape: tuple[int, ...]
    dtype: str = "float32"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Box):
            return NotImplemented
        if tuple(self.shape) != tuple(other.shape) or str(self.dtype) != str(other.dtype):
            return False
        import numpy

        def bound(value: float | np.ndarray) -> np.ndarray:
            return numpy.broadcast_to(numpy.asarray(value, dtype=numpy.float64), tuple(self.shape))

        try:
            return bool(
                numpy.array_equal(bound(self.low), bound(other.low), equal_nan=True)
                and numpy.array_equal(bound(self.high), bound(other.high), equal_nan=True)
            )
        except ValueError:  # a bound of another shape than the space's
            return False

    def __hash__(self) -> int:
        return hash((tuple(self.shape), str(self.dtype)))

    def __str__(self) -> str:
        return f"Box{tuple(self.shape)}"


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
