"""Minimal observation/action spaces, so msrl needs no gymnasium at run time."""

from __future__ import annotations

from dataclasses import dataclass

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
