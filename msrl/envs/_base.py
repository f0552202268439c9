"""``BatchedEnv``: the one base of msrl's environments, parameterised by its array backend.

An environment is a class that declares its constants, spaces and time limit,
and its physics once per array backend (``physics = {"numpy": ..., "torch":
...}``, and ``kernel = "cartpole"``, the name of its CUDA C kernels).  Everything else
is here, once: action checks (``ActionCheck``, derived from the action space),
episode tracking (``EpisodeTracker``), the time limit and same-step autoreset,
seeding, ``get_state``/``set_state`` and checkpoints.

How a batch advances is the environment's *dynamics*:

* ``HostDynamics``: the physics runs as NumPy or torch operations, then the
  time limit is applied and finished environments are reset here.
* ``KernelDynamics`` (``msrl.envs._kernels``): one fused kernel launch does
  physics, time limit, autoreset and the episode bookkeeping; it is used when
  the environment is built with ``kernels=`` (the ``cuda``, ``cuda-emulated``
  and ``cpu-kernel`` backends, which ``fragments`` supplies with a launcher).

Either way the dynamics record the step into the episode tracker, whose
running length is the per-environment elapsed-step counter, so one checkpoint
layout (``state``, ``rng``, ``episodes``) serves every backend.

Example, an environment written for NumPy::

    class Walk(BatchedEnv):
        '''Walk left or right from 0; reaching +-3 ends the episode with reward 1.'''
        env_id, max_episode_steps, state_dim = "Walk-v0", 20, 1
        observation_space = msrl.Box(-3.0, 3.0, (1,))
        action_space = msrl.Discrete(2)

        class NumpyPhysics(Physics):
            def draw_reset(self, n):
                return np.zeros((n, 1))
            def write_obs(self, state, out):
                out[:] = state
            def step(self, state, action, reward, terminated):
                new = state + np.where(action, 1.0, -1.0)[:, None]
                np.greater_equal(np.abs(new[:, 0]), 3.0, out=terminated)
                reward[:] = terminated
                return new

        physics = {"numpy": NumpyPhysics}

    env = Walk(num_envs=8, seed=0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import torch

from msrl.core import Batched, CheckpointError, ConfigError, Environment
from msrl.envs._actions import ActionCheck
from msrl.envs._arrays import Array, ArrayBackend
from msrl.envs._episodes import Episodes, EpisodeTracker
from msrl.envs._kernels import KernelDynamics, Kernels
from msrl.envs._numpy_arrays import NumpyArrays, numpy_real
from msrl.envs._state_access import StateAccess, check_shape
from msrl.envs._torch_arrays import TorchArrays

_STATE_KEYS = ("state", "rng", "episodes")


def check_num_envs(num_envs: Any) -> int:
    """``num_envs`` as an int, or a ``ConfigError`` naming it."""
    if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    return int(num_envs)


def _numpy_arrays(device: Any, dtype: Any, validate: bool) -> ArrayBackend:
    if device is not None and torch.device(device).type != "cpu":
        raise ConfigError(f"the numpy backend runs on the cpu, got device={device!r}; use backend='torch'")
    if dtype is not None and numpy_real(dtype) != np.float64:
        raise ConfigError(f"the numpy backend keeps float64 state (gymnasium's), got dtype={dtype!r}")
    return NumpyArrays()  # validate: always


def _torch_arrays(device: Any, dtype: Any, validate: bool) -> ArrayBackend:
    return TorchArrays(device, torch.float32 if dtype is None else dtype, validate)


ARRAY_BACKENDS: dict[str, Callable[[Any, Any, bool], ArrayBackend]] = {"numpy": _numpy_arrays, "torch": _torch_arrays}
"""Array backend name -> ``builder(device, dtype, validate)``."""


def array_backend(
    backend: str | ArrayBackend, device: Any = None, dtype: Any = None, validate: bool = False
) -> ArrayBackend:
    """The backend named ``backend`` (``"numpy"`` or ``"torch"``) built from the options, or
    ``backend`` itself when it is already one (then the options must be left out)."""
    if isinstance(backend, ArrayBackend):
        if device is not None or dtype is not None:
            raise ConfigError("pass device and dtype to the ArrayBackend, not beside it")
        return backend
    if backend not in ARRAY_BACKENDS:
        raise ConfigError(f"unknown array backend {backend!r}; valid choices: {', '.join(ARRAY_BACKENDS)}")
    return ARRAY_BACKENDS[backend](device, dtype, validate)


EnvT = TypeVar("EnvT", bound="BatchedEnv")


class Physics(Generic[EnvT]):
    """One environment's dynamics on one array backend: what is left of a step once
    action checks, the time limit, autoreset and bookkeeping are shared.

    ``env`` gives the constants (class attributes of the environment, so a
    subclass can change one), ``env.arrays`` the device and dtype; ``rng`` is the
    backend's generator (``np.random.Generator`` or ``torch.Generator``), the only
    source of randomness, so that seeds and checkpoints reproduce the draws.
    ``Physics[CartPoleBase]`` types ``env`` as the class that declares the
    constants, which both backends' modules import (neither imports the other).
    """

    def __init__(self, env: EnvT, rng: Any) -> None:
        self.env = env
        self.rng = rng

    def draw_reset(self, n: int) -> Array:
        """``n`` fresh start states, ``(n, state_dim)`` in the backend's memory."""
        raise NotImplementedError

    def write_obs(self, state: Array, out: Array) -> None:
        """Write the float32 observations of ``state`` into ``out``."""
        raise NotImplementedError

    def step(self, state: Array, action: Array, reward: Array, terminated: Array) -> Array:
        """Advance ``state`` by one step of checked ``action``s: write the float32
        rewards and 0/1 ``terminated`` flags, and return the new state (a new array,
        or ``state`` updated in place)."""
        raise NotImplementedError


class HostDynamics:
    """Physics as array operations, then the time limit, same-step autoreset and the
    episodes' record (``Episodes.record``)."""

    exact_actions = False  # host physics takes actions in the backend's usual dtypes
    fuse_episodes = False  # the episodes are recorded by array operations (EpisodeTracker.record)

    def __init__(self, env: BatchedEnv, physics: type[Physics[Any]], seed: int) -> None:
        self.name = env.arrays.name
        self.arrays = env.arrays
        self.rng = env.arrays.new_rng(seed)
        self.physics = physics(env, self.rng.generator)
        # Truncated: the step that makes ``max_episode_steps``, i.e. the tracker's
        # running length (steps before this one) has reached the limit minus one.
        self._last_step = env.arrays.scalar(env.max_episode_steps - 1, "int64")
        self.keep_final = False  # from the first final_obs() on: copy the state before a reset
        self._finished: Any = None  # the rows the last step finished (None: none)
        self._final_state: Array | None = None  # their states before the reset, where kept

    def reset(self, state: Array) -> Array:
        return self.arrays.own_state(self.physics.draw_reset(state.shape[0]))

    def observe(self, state: Array, out: Array) -> None:
        self.physics.write_obs(state, out)

    def step(
        self,
        state: Array,
        episodes: Episodes,
        action: Array,
        obs: Array,
        reward: Array,
        terminated: Array,
        truncated: Array,
    ) -> Array:
        new = self.physics.step(state, action, reward, terminated)
        rows = self.arrays.truncate(episodes.lengths, self._last_step, terminated, truncated)
        self._finished, self._final_state = rows, None
        if rows is not None:
            if self.keep_final:
                self._final_state = self.arrays.copy(new)
            new = self.arrays.reset_rows(new, rows, self.physics.draw_reset)
        self.physics.write_obs(new, obs)
        episodes.record(reward, rows)
        return new

    def final_obs(self, obs: Any) -> Any:
        """``obs``, the last step's observations (an array, or a multi-agent environment's dict of
        one per group), with the rows it finished set to their episodes' last observations (NaN
        before the first call: keeping starts there)."""
        self.keep_final = True
        if self._finished is not None:
            parts = obs if isinstance(obs, dict) else {None: obs}
            if self._final_state is None:
                for part in parts.values():
                    self.arrays.fill_rows(part, self._finished, float("nan"))
            else:
                final = {k: self.arrays.obs_buffer(v.shape[0], tuple(v.shape[1:])) for k, v in parts.items()}
                self.physics.write_obs(self._final_state, final if isinstance(obs, dict) else final[None])
                for k, part in parts.items():
                    self.arrays.copy_rows(part, final[k], self._finished)
        return obs

    def forget_final(self) -> None:
        """A reset or a restored checkpoint: the last step finished nothing."""
        self._finished, self._final_state = None, None


def host_dynamics(env: BatchedEnv, seed: int) -> HostDynamics:
    """``env``'s physics for its array backend as ``HostDynamics``, or a ``ConfigError`` naming
    the backends it has."""
    name = env.arrays.name
    if name not in env.physics:
        kinds = [*env.physics, *(["kernels (cuda, cuda-emulated)"] if env.kernel else [])]
        raise ConfigError(f"{env.env_id} has no {name} physics; it runs on: {', '.join(kinds) or 'nothing'}")
    return HostDynamics(env, env.physics[name], seed)


class BatchedEnv(StateAccess, Environment):
    """A batch of ``num_envs`` copies of one environment on one array backend.

    A subclass declares ``env_id``, ``max_episode_steps``, ``state_dim``, its
    spaces (class attributes, or ``spaces()`` when they depend on constants) and
    ``physics``: a ``Physics`` class per array backend name.  ``kernel`` names
    its CUDA C kernels, if it has them (their source is ``<kernel>.cu`` in the
    environment's folder, which its registration names).  The constructor picks the backend:

    * ``backend="numpy"`` (default): float64 state, like gymnasium's; action
      values always checked.
    * ``backend="torch"``: state in ``dtype`` (float32 default) on ``device``;
      action values checked only with ``validate=True`` (a check syncs the device).
    * an ``ArrayBackend`` instance, and ``kernels=`` to step by fused kernels.

    ``step(action)`` returns float32 ``(obs, reward, terminated, truncated)``,
    the flags as 0/1; a finished environment is reset in the same step, so its
    ``obs`` is the first of its next episode.  ``metrics()`` gives
    ``episode_return``, ``episode_length`` and ``episodes`` of the episodes
    finished since the last call.
    The module docstring has an example.
    """

    env_id: ClassVar[str]
    max_episode_steps: int
    """A class attribute, or an instance one set before ``__init__`` where a constant decides it."""
    state_dim: int
    physics: ClassVar[Mapping[str, type[Physics[Any]]]] = {}
    reward_threshold: ClassVar[float | None] = None
    """The episode return at which the environment counts as solved (``EnvSpec.reward_threshold``):
    gymnasium's value for an id gymnasium also has, None where there is no agreed one."""
    kernel: ClassVar[str | None] = None
    """The name of the CUDA C kernels ``<kernel>_reset``, ``_step`` and ``_observe``, and the
    stem of their source (``<kernel>.cu`` in the environment's folder, named by its
    ``EnvRegistration``); None when the environment has no kernels."""

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        *,
        backend: str | ArrayBackend = "numpy",
        device: Any = None,
        dtype: Any = None,
        validate: bool = False,
        kernels: Kernels | None = None,
    ) -> None:
        self.num_envs = check_num_envs(num_envs)
        self.arrays = array_backend(backend, device, dtype, validate)
        self.observation_space, self.action_space = self.spaces()
        self.dynamics = self._kernel_dynamics(kernels, seed) if kernels is not None else host_dynamics(self, seed)
        self._check_action = self._action_check()
        self._episodes = EpisodeTracker(self.arrays, self.num_envs, counts_per_env=self.dynamics.fuse_episodes)
        self._obs_shape = tuple(getattr(self.observation_space, "shape", ()))
        self._stepping = self.arrays.stepping
        self._state = self.dynamics.reset(self.arrays.zeros((self.num_envs, self.state_dim), "real"))

    def _kernel_dynamics(self, kernels: Kernels, seed: int) -> KernelDynamics:
        """Stepping by ``kernels`` (``MultiAgentEnv`` launches one block per environment)."""
        return KernelDynamics(self, kernels, seed)

    def _action_check(self) -> Callable[[Any], Any]:
        """What ``step`` checks its actions with (``MultiAgentEnv`` checks one batch per group)."""
        return ActionCheck(
            self.env_id, self.action_space, self.num_envs, self.arrays, exact=self.dynamics.exact_actions
        )

    def spaces(self) -> tuple[Any, Any]:
        """``(observation_space, action_space)``; override when they depend on constants.  Each is
        a ``Space``, or for a multi-agent environment a dict group -> ``Space`` (``msrl.Environment``'s
        contract, which its annotation, one ``Space``, does not spell out)."""
        cls = type(self)
        return cls.observation_space, cls.action_space

    def kernel_defines(self) -> dict[str, object]:
        """Preprocessor definitions that compile this instance's constants into its kernels."""
        return {}

    @property
    def device(self) -> Any:
        return self.arrays.device

    @property
    def dtype(self) -> Any:
        """The dtype of the state (observations are float32 whatever it is)."""
        return self.arrays.dtype

    @property
    def validate(self) -> bool:
        return self.arrays.validate

    # -- Environment API ---------------------------------------------------------
    def reset(self, seed: int | None = None) -> Batched:
        """Start a new episode everywhere; ``seed`` re-seeds, so ``reset(seed=s)``
        gives the same first states as constructing with ``s``."""
        if seed is not None:
            self.dynamics.rng.reseed(seed)
        self._state = self.dynamics.reset(self._state)
        self._discard_episodes()
        self.dynamics.forget_final()
        return self.observe()

    def observe(self) -> Batched:
        obs = self.arrays.obs_buffer(self.num_envs, self._obs_shape)
        self.dynamics.observe(self._state, obs)
        return obs

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        """Advance every environment one step; finished ones restart in the same step."""
        checked = self._check_action(action)
        out = self.arrays.step_outputs(self.num_envs, self._obs_shape)
        with self._stepping():
            self._state = self.dynamics.step(self._state, self._episodes, checked, *out)
        return out

    def final_obs(self) -> Batched:
        """The observations the last ``step`` ended in: its ``obs`` where an episode goes on, and
        where the step ended one (and restarted it), that episode's last observation, which a
        time-limited transition bootstraps from.  Rows are NaN where it is not known: fused
        kernels reset inside the step, and host physics keeps it from the first call on."""
        return self.dynamics.final_obs(self.observe())

    # -- Component API ----------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self._episodes.metrics()

    def state_dict(self) -> dict[str, Any]:
        """State, random generator and episodes: tensors and plain values only, so
        ``torch.load(weights_only=True)`` reads it; resuming repeats the run exactly."""
        return {
            "state": self.arrays.to_tensor(self._state),
            "rng": self.dynamics.rng.state_dict(),
            "episodes": self._episodes.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        name = type(self).__name__
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise CheckpointError(f"{name} checkpoint lacks {missing}; expected keys {list(_STATE_KEYS)}")
        check_shape(
            f"{name} checkpoint state", tuple(state["state"].shape), (self.num_envs, self.state_dim), CheckpointError
        )
        self._episodes.load_state_dict(state["episodes"])
        self.dynamics.rng.load_state_dict(state["rng"])
        self._state = self.arrays.own_state(self.arrays.asarray(state["state"]))
        self.dynamics.forget_final()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, {self.dynamics.name} on {self.device})"


__all__ = ["BatchedEnv", "HostDynamics", "Physics", "check_num_envs", "check_shape", "host_dynamics"]
