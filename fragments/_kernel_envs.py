"""Host side of the kernel-backed environments, shared by the GPU backends
(``fragments.cuda``: torch CUDA tensors, pycuda launches) and their CPU twins
(``fragments._emulated_envs``: NumPy arrays, emulated launches).

Everything an environment does between kernel launches lives here once:
the Philox seed/counter (the whole random state, two integers), buffer
allocation, episode accounting for ``metrics``, ``set_state`` for
consistency checks, and checkpoints.  A subclass supplies the array library
through a handful of hooks (``_empty``, ``_launch``, ``_as_real``...), so the
emulated twin exercises the same host code as the GPU backend.
"""

from __future__ import annotations

from typing import Any

import torch

from msrl._components import Environment
from msrl._errors import CheckpointError, ConfigError, EnvError
from msrl.envs._episodes import _check_num_envs, _check_state_keys

_U64 = (1 << 64) - 1
_STATE_KEYS = ("state", "elapsed", "rng", "episodes")


class KernelEnv(Environment):
    """A batched environment whose reset/step are CUDA kernels of ``_source``.cu.

    Subclasses (per environment) set ``env_id``, ``state_dim``, ``obs_dim``,
    ``_source`` (kernel file and kernel-name prefix) and implement
    ``_as_action``; mixins (per array library) implement the hooks below.

    Random state: every launch that draws random numbers gets launch counter
    ``self._counter`` and advances it, so ``(seed, counter)`` in a checkpoint
    resumes the exact same draws.  ``reset(seed=s)`` restarts the counter.
    """

    env_id: str
    state_dim: int
    obs_dim: int
    max_episode_steps: int
    _source: str

    def _init_kernel_env(self, num_envs: int, seed: int, threads_per_block: int) -> None:
        self.num_envs = _check_num_envs(num_envs)
        if not isinstance(threads_per_block, int) or not 1 <= threads_per_block <= 1024:
            raise ConfigError(f"threads_per_block must be an integer in [1, 1024], got {threads_per_block!r}")
        self.threads_per_block = threads_per_block
        self._grid = (-(-self.num_envs // threads_per_block), 1, 1)
        self._block = (threads_per_block, 1, 1)
        self._seed = int(seed) & _U64
        self._counter = 0
        n = self.num_envs
        self._state = self._empty((n, self.state_dim), "real")
        self._elapsed = self._empty((n,), "int32")
        self._tracker = self._new_tracker()
        self.reset()

    # -- hooks of the array library --------------------------------------
    def _empty(self, shape: tuple[int, ...], kind: str) -> Any:  # kind: real, float32, int32, int64
        raise NotImplementedError

    def _launch(self, kernel: str, args: list[Any]) -> None:
        raise NotImplementedError

    def _as_real(self, value: Any) -> Any:
        """``value`` (NumPy array or tensor) as a contiguous array of ``real`` in this env's memory."""
        raise NotImplementedError

    def _as_mask(self, mask: Any) -> Any:
        raise NotImplementedError

    def _where(self, mask: Any, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def _copy(self, array: Any) -> Any:
        raise NotImplementedError

    def _to_cpu_tensor(self, array: Any) -> torch.Tensor:
        raise NotImplementedError

    def _new_tracker(self) -> Any:
        raise NotImplementedError

    def _finish_episodes(self, terminated: Any, truncated: Any) -> None:
        self._tracker.finish((terminated + truncated) > 0)

    # -- per environment ---------------------------------------------------
    def _as_action(self, action: Any) -> Any:
        raise NotImplementedError

    # -- Environment API -----------------------------------------------------
    def _next_counter(self, launches: int = 1) -> int:
        counter = self._counter
        self._counter = (self._counter + launches) & _U64
        return counter

    def reset(self, seed: int | None = None) -> Any:
        """Start new episodes everywhere (drawn on the device); ``seed``
        re-seeds, so ``reset(seed=s)`` equals a fresh env built with ``s``."""
        if seed is not None:
            self._seed, self._counter = int(seed) & _U64, 0
        obs = self._empty((self.num_envs, self.obs_dim), "float32")
        self._launch(
            f"{self._source}_reset",
            [self._state, self._elapsed, obs, self.num_envs, self._seed, self._next_counter()],
        )
        self._tracker.discard()
        return obs

    def observe(self) -> Any:
        obs = self._empty((self.num_envs, self.obs_dim), "float32")
        self._launch(f"{self._source}_observe", [self._state, obs, self.num_envs])
        return obs

    def step(self, action: Any) -> tuple[Any, Any, Any, Any]:
        """One kernel launch: physics, time limit and same-step autoreset."""
        a = self._as_action(action)
        n = self.num_envs
        obs = self._empty((n, self.obs_dim), "float32")
        reward, terminated, truncated = (self._empty((n,), "float32") for _ in range(3))
        self._launch(
            f"{self._source}_step",
            [self._state, self._elapsed, a, obs, reward, terminated, truncated, n, self._seed, self._next_counter()],
        )
        self._tracker.add(reward)
        self._finish_episodes(terminated, truncated)
        return obs, reward, terminated, truncated

    # -- direct state access (tests, consistency checks) ------------------
    def get_state(self) -> Any:
        """A copy of the physical state, ``(num_envs, state_dim)`` in ``real``."""
        return self._copy(self._state)

    def get_elapsed(self) -> Any:
        """A copy of the per-env step counters the time limit uses (int32)."""
        return self._copy(self._elapsed)

    def set_state(self, state: Any, mask: Any = None, *, new_episode: bool = True) -> None:
        """Overwrite the physical state (all envs, or the rows where ``mask``);
        ``new_episode`` (default) also zeroes their elapsed steps and running
        returns, as ``msrl.envs`` backends do."""
        state = self._as_real(state)
        if tuple(state.shape) != (self.num_envs, self.state_dim):
            raise EnvError(
                f"{self.env_id} state must have shape ({self.num_envs}, {self.state_dim}), got {tuple(state.shape)}"
            )
        if mask is None:
            self._state[...] = state
            if new_episode:
                self._elapsed[...] = 0
                self._tracker.discard()
            return
        mask = self._as_mask(mask)
        if tuple(mask.shape) != (self.num_envs,):
            raise EnvError(f"{self.env_id} state mask must have shape ({self.num_envs},), got {tuple(mask.shape)}")
        self._state[...] = self._where(mask[:, None], state, self._state)
        if new_episode:
            self._elapsed[...] = self._where(mask, 0, self._elapsed)
            self._tracker.discard(mask)

    # -- Component API -----------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self._tracker.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {
            "state": self._to_cpu_tensor(self._state),
            "elapsed": self._to_cpu_tensor(self._elapsed),
            "rng": {"seed": self._seed, "counter": self._counter},  # Philox: the whole random state
            "episodes": self._tracker.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_state_keys(self, state, _STATE_KEYS)
        rng = state["rng"]
        if not isinstance(rng, dict) or not {"seed", "counter"} <= set(rng):
            raise CheckpointError(f"{type(self).__name__} checkpoint rng must be {{'seed', 'counter'}}, got {rng!r}")
        elapsed = torch.as_tensor(state["elapsed"])
        if tuple(elapsed.shape) != (self.num_envs,):
            raise CheckpointError(
                f"{type(self).__name__} checkpoint holds elapsed of shape {tuple(elapsed.shape)}, "
                f"expected ({self.num_envs},)"
            )
        self._tracker.load_state_dict(state["episodes"])
        self._state[...] = self._as_real(state["state"])
        self._elapsed[...] = self._as_int32(elapsed)
        self._seed, self._counter = int(rng["seed"]) & _U64, int(rng["counter"]) & _U64

    def _as_int32(self, value: torch.Tensor) -> Any:
        raise NotImplementedError


class CartPoleKernelMixin:
    """CartPole-v1 specifics: int64 actions in {0, 1} and the rollout kernel."""

    env_id = "CartPole-v1"
    state_dim = 4
    obs_dim = 4
    _source = "cartpole"

    def rollout(self, steps: int) -> Any:
        """Step every env ``steps`` times with uniformly random actions in one
        kernel launch (the state stays in registers): the "kernel alone"
        throughput.  Returns ``(num_envs, 2)`` ``real``: per env, the summed
        return of the episodes that ended during the rollout and their number.
        Those episodes bypass ``metrics()``; afterwards the running episode
        bookkeeping is re-aligned with the device counters.
        """
        if not isinstance(steps, int) or steps < 0 or steps >= 2**31:
            raise ConfigError(f"steps must be a non-negative int32, got {steps!r}")
        out = self._empty((self.num_envs, 2), "real")
        self._launch(
            "cartpole_rollout",
            [self._state, self._elapsed, self.num_envs, steps, self._seed, self._next_counter(steps), out],
        )
        # CartPole pays +1 per step: a running episode's return is its length.
        self._tracker.discard()
        self._tracker.adopt_running(self._elapsed, self._elapsed)
        return out
