"""Direct access to a ``BatchedEnv``'s physical state (``StateAccess``), for tests and consistency
checks, and the shape check it shares with checkpoints (``check_shape``)."""

from __future__ import annotations

from typing import Any, ClassVar

from msrl.core import EnvError
from msrl.envs._arrays import Array, ArrayBackend
from msrl.envs._episodes import EpisodeTracker


def check_shape(what: str, shape: tuple[int, ...], expected: tuple[int, ...], error: type[Exception]) -> None:
    """An ``error`` naming ``what`` unless ``shape == expected`` (state, masks, checkpoints)."""
    if shape != expected:
        raise error(f"{what} must have shape {expected}, got {shape}")


class StateAccess:
    """Direct access to a ``BatchedEnv``'s physical state, for tests and consistency checks (two
    backends re-aligned mid-episode); kept apart from the environment's stepping API."""

    env_id: ClassVar[str]
    num_envs: int
    state_dim: int
    arrays: ArrayBackend
    _state: Array
    _episodes: EpisodeTracker

    def get_state(self) -> Array:
        """A copy of the physical state, ``(num_envs, state_dim)`` in ``dtype``."""
        return self.arrays.copy(self._state)

    def get_elapsed(self) -> Array:
        """A copy of the steps each environment's running episode has taken (int64):
        the counter the time limit reads."""
        return self.arrays.copy(self._episodes.lengths)

    def set_state(self, state: Any, mask: Any = None, *, new_episode: bool = True) -> None:
        """Overwrite the physical state (all envs, or the rows where ``mask``).

        By default this starts new episodes there (elapsed steps and running
        return are zeroed); ``new_episode=False`` keeps them, which lets a
        consistency check re-align two backends mid-episode without moving
        their time limits.  Accepts NumPy arrays and tensors on any device.
        """
        state = self.arrays.asarray(state)
        check_shape(f"{self.env_id} state", tuple(state.shape), (self.num_envs, self.state_dim), EnvError)
        if mask is not None:
            mask = self.arrays.convert(mask, "bool")
            check_shape(f"{self.env_id} state mask", tuple(mask.shape), (self.num_envs,), EnvError)
            state = self.arrays.where(mask[:, None], state, self._state)
        self._state = self.arrays.own_state(state)
        if new_episode:
            self._discard_episodes(mask)

    def _discard_episodes(self, mask: Array | None = None) -> None:
        """Forget the running episodes (all, or where ``mask``): ``reset`` and ``set_state``."""
        self._episodes.discard(mask)


__all__ = ["StateAccess", "check_shape"]
