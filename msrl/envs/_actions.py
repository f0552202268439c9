"""Checking a batch of actions, derived once from the action space.

What a valid batch is follows from the space alone, so it is written once for
every environment and backend:

* ``Discrete(n)``: shape ``(num_envs,)``, integer-valued (integers, bools, or
  floats holding integers) in ``[0, n)``.
* ``Box(shape)``: numbers of shape ``(num_envs, *shape)``, or ``(num_envs,)``
  when ``shape`` is ``(1,)``, finite.  Bounds are the environment's business
  (gymnasium's Pendulum clips its torque).

Shapes and dtypes are host metadata and always checked.  Values are checked
where the backend says it is free (``ArrayBackend.validate``: always on NumPy;
on torch and CUDA only with ``validate=True``, since reading a device value
syncs the device with the host).
"""

from __future__ import annotations

from typing import Any

from msrl.core import Box, ConfigError, Discrete, EnvError, Space
from msrl.envs._arrays import Array, ArrayBackend

_EXACT = {"discrete": "int64", "box": "float32"}
"""The dtypes fused kernels take actions in (``long long*`` and ``float*``)."""


class ActionCheck:
    """``check(action)`` validates a batch for ``space`` and returns it as the
    physics wants it: in the backend's memory, an index for ``Discrete`` and a
    float array for ``Box`` (flattened to ``(num_envs,)`` when the space's shape is
    ``(1,)``).  With ``exact=True`` (kernels) the result is a contiguous int64 or
    float32 array, whatever came in.  Errors are ``EnvError`` naming the
    environment, what was expected and what came.

    Example::

        >>> from msrl.envs import NumpyArrays
        >>> check = ActionCheck("CartPole-v1", Discrete(2), 3, NumpyArrays())
        >>> check([0, 1, 1])
        array([0, 1, 1])
        >>> check([0, 2, 1])
        Traceback (most recent call last):
        EnvError: CartPole-v1 actions must be 0 or 1, got values in [0, 2]
    """

    def __init__(self, env_id: str, space: Space, num_envs: int, arrays: ArrayBackend, *, exact: bool = False) -> None:
        self.env_id, self.space, self.num_envs, self.arrays, self.exact = env_id, space, num_envs, arrays, exact
        self._n = 0  # Discrete's number of actions
        if isinstance(space, Discrete):
            self._discrete, self._n = True, space.n
            self.shapes: tuple[tuple[int, ...], ...] = ((num_envs,),)
            self._values = "0 or 1" if space.n == 2 else f"integers in [0, {space.n - 1}]"
            self._expected = f"shape ({num_envs},) with values in " + (
                "{0, 1}" if space.n == 2 else f"{{0, ..., {space.n - 1}}}"
            )
        elif isinstance(space, Box):
            self._discrete = False
            shape = tuple(space.shape)
            self.shapes = ((num_envs, *shape), (num_envs,)) if shape == (1,) else ((num_envs, *shape),)
            self._flatten = shape == (1,)
            self._expected = "float actions of shape " + " or ".join(_shape(s) for s in self.shapes)
        else:
            raise ConfigError(f"{env_id}: msrl environments take Discrete or Box actions, got {space!r}")
        self._validate = arrays.validate
        self._check = self._check_discrete if self._discrete else self._check_box
        self._asarray, self._kind = arrays.asarray, arrays.kind  # bound once: this runs every step

    def __call__(self, action: Any) -> Array:
        try:
            a = self._asarray(action)
        except (TypeError, ValueError) as exc:  # e.g. strings, which torch cannot hold
            raise EnvError(f"{self.env_id} actions must be numbers, got {type(action).__name__}: {exc}") from None
        if a.shape not in self.shapes:  # torch.Size is a tuple
            noun = "actions of " if self._discrete else ""
            raise EnvError(f"{self.env_id} expects {noun}{self._expected}, got shape {_shape(tuple(a.shape))}")
        return self._check(a, self._kind(a))

    def _check_discrete(self, a: Array, kind: str) -> Array:
        if kind not in "biuf":
            raise EnvError(f"{self.env_id} actions must be integers {self._values}, got dtype {a.dtype}")
        if self._validate and not self.arrays.discrete_ok(a, kind, self._n):
            raise EnvError(f"{self.env_id} actions must be {self._values}, got values in {self.arrays.value_range(a)}")
        if self.exact:
            return self.arrays.contiguous(a, "int64")
        return self.arrays.index_action(a)

    def _check_box(self, a: Array, kind: str) -> Array:
        if kind not in "iuf":
            raise EnvError(f"{self.env_id} actions must be floats, got dtype {a.dtype}")
        a = self.arrays.contiguous(a, "float32") if self.exact else self.arrays.float_action(a)
        if self._validate and not self.arrays.all_finite(a):
            raise EnvError(f"{self.env_id} actions must be finite, got NaN or inf")
        return a.reshape(self.num_envs) if self._flatten else a


def _shape(shape: tuple[int, ...]) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(str(d) for d in shape)})"


__all__ = ["ActionCheck"]
