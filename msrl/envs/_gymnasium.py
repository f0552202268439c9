"""Any gymnasium environment as an msrl environment.

An id that msrl does not build in (``"Acrobot-v1"``, ``"HalfCheetah-v5"`` with
``gymnasium[mujoco]``...) is made through gymnasium's maintained vector API: a
``SyncVectorEnv`` of ``num_envs`` copies with same-step autoreset, the
behaviour of msrl's own environments.  ``GymnasiumEnv`` then gives it msrl's
contract: float32 observations (``Box``) or int64 indices (``Discrete``),
float32 rewards and 0/1 ``terminated``/``truncated`` flags, the obs of a
finished environment being the first of its next episode; actions checked by
the same ``ActionCheck`` and episodes counted by the same ``EpisodeTracker`` as
the built-in environments, so ``metrics()`` has the same keys.  ``Box`` actions
are clipped to the space's bounds before gymnasium sees them (CleanRL's
``ClipAction``, SB3's rollout clip): some environments charge a control cost on
the action they are given (MuJoCo's, ``MountainCarContinuous``), and a Gaussian
policy's samples leave the bounds.

gymnasium is imported when an environment is first made or looked up, never
by ``import msrl.envs``.  Checkpoints cannot snapshot a gymnasium environment
in general (its state lives in Python objects, MuJoCo data, emulators...), so
``state_dict`` keeps what can be kept: the episode counts and a seed and step
counter, from which ``load_state_dict`` restarts every episode reproducibly.
Resume is exact only for msrl's built-in environments.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from msrl.core import Batched, Box, CheckpointError, ConfigError, Discrete, Environment
from msrl.envs._actions import ActionCheck
from msrl.envs._base import check_num_envs
from msrl.envs._episodes import EpisodeTracker
from msrl.envs._numpy_arrays import NumpyArrays

_MUJOCO_HINT = 'with msrl: pip install "msrl[mujoco]"'


def _gymnasium() -> Any | None:
    try:
        import gymnasium
    except ImportError:
        return None
    return gymnasium


def knows(env_id: str) -> bool:
    """Whether gymnasium (if installed) can make ``env_id``; ``"module:Id"`` imports
    ``module`` first, as ``gymnasium.make`` does, so plug-in packages register."""
    gym = _gymnasium()
    if gym is None or not isinstance(env_id, str):
        return False
    if env_id in gym.envs.registry:
        return True
    module, sep, name = env_id.partition(":")
    if not sep or not module:
        return False
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return name in gym.envs.registry


def ids() -> list[str]:
    """gymnasium's registered ids (for close-match suggestions); [] without gymnasium."""
    gym = _gymnasium()
    return sorted(gym.envs.registry) if gym is not None else []


def _msrl_space(env_id: str, what: str, space: Any) -> Box | Discrete:
    gym = _gymnasium()
    if gym is None:  # the space came from gymnasium (or PettingZoo, which needs it)
        raise ConfigError(f"{env_id}: reading a gymnasium space needs gymnasium: pip install gymnasium")
    if isinstance(space, gym.spaces.Discrete):
        return Discrete(int(space.n))
    if isinstance(space, gym.spaces.Box):
        dtype = "float32" if what == "observation" else np.dtype(space.dtype).name
        return Box(low=space.low, high=space.high, shape=tuple(space.shape), dtype=dtype)
    raise ConfigError(f"{env_id} has a {type(space).__name__} {what} space ({space}); msrl takes Box or Discrete")


def _restart_seed(seed: int, steps: int) -> int:
    """The seed episodes restart from after a checkpoint taken ``steps`` steps into a
    run seeded ``seed``: a function of both, so restarts are reproducible but do
    not replay the run's first episodes."""
    return int(np.random.SeedSequence([seed & (2**64 - 1), steps]).generate_state(1)[0])


class GymnasiumEnv(Environment):
    """``num_envs`` copies of gymnasium's ``env_id`` (its ``**kwargs`` go to
    ``gymnasium.make``), stepped together with same-step autoreset.

    ``seed`` seeds copy ``i`` with ``seed + i`` (gymnasium's vector rule), so
    ``make(env_id, n, seed=s)`` is reproducible, and so is ``reset(seed=s)``.
    Spaces other than ``Box`` and ``Discrete`` are refused.

    Example::

        >>> env = GymnasiumEnv("Acrobot-v1", num_envs=4, seed=0)
        >>> obs, reward, terminated, truncated = env.step(np.zeros(4, np.int64))
        >>> obs.dtype, obs.shape, reward.dtype
        (dtype('float32'), (4, 6), dtype('float32'))
    """

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, **kwargs: Any) -> None:
        gym = _gymnasium()
        if gym is None:
            raise ConfigError(f"{env_id} is made through gymnasium, which is not installed: pip install gymnasium")
        self.env_id = env_id
        self.num_envs = check_num_envs(num_envs)
        self._vec = self._make_vec(gym, kwargs)
        try:
            single_obs, single_act = self._vec.single_observation_space, self._vec.single_action_space
            self.observation_space = _msrl_space(env_id, "observation", single_obs)
            self.action_space = _msrl_space(env_id, "action", single_act)
        except ConfigError:
            self._vec.close()
            raise
        registered = getattr(self._vec, "spec", None)
        threshold = getattr(registered, "reward_threshold", None)
        self.reward_threshold: float | None = None if threshold is None else float(threshold)
        """gymnasium's registry value for ``env_id`` (None where it has none)."""
        self._obs_offset = int(getattr(single_obs, "start", 0))
        self._action_offset = int(getattr(single_act, "start", 0))
        self._action_dtype = np.int64 if isinstance(self.action_space, Discrete) else single_act.dtype
        self._action_shape: tuple[int, ...] = tuple(getattr(self.action_space, "shape", ()))  # a Box's
        self._action_bounds = (getattr(single_act, "low", None), getattr(single_act, "high", None))
        self._arrays = NumpyArrays()
        self._check_action = ActionCheck(env_id, self.action_space, self.num_envs, self._arrays)
        self._episodes = EpisodeTracker(self._arrays, self.num_envs)
        self._seed, self._steps = int(seed), 0
        self._obs = self._convert_obs(self._vec.reset(seed=self._seed)[0])
        self._final: tuple[np.ndarray, Any] | None = None  # rows the last step finished, gymnasium's final_obs

    def _make_vec(self, gym: Any, kwargs: dict[str, Any]) -> Any:
        try:
            return gym.make_vec(
                self.env_id,
                self.num_envs,
                vectorization_mode="sync",
                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
                **kwargs,
            )
        except (gym.error.Error, ImportError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            hint = f"; {_MUJOCO_HINT}" if "mujoco" in first.lower() else ""
            raise ConfigError(f"gymnasium cannot make {self.env_id!r}: {first}{hint}") from exc

    def _convert_obs(self, obs: Any) -> np.ndarray:
        if isinstance(self.observation_space, Discrete):
            return np.asarray(obs, dtype=np.int64) - self._obs_offset
        return np.array(obs, dtype=np.float32)

    def _to_gymnasium(self, action: np.ndarray) -> np.ndarray:
        if isinstance(self.action_space, Discrete):
            return np.asarray(action, dtype=np.int64) + self._action_offset
        box = np.asarray(action, dtype=self._action_dtype).reshape(self.num_envs, *self._action_shape)
        return np.clip(box, *self._action_bounds)

    # -- Environment API ---------------------------------------------------------
    def reset(self, seed: int | None = None) -> Batched:
        """Start a new episode everywhere; ``reset(seed=s)`` equals a fresh env seeded ``s``."""
        if seed is not None:
            self._seed, self._steps = int(seed), 0
        self._obs = self._convert_obs(self._vec.reset(seed=seed)[0])
        self._final = None
        self._episodes.discard()
        return self._obs.copy()

    def observe(self) -> Batched:
        return self._obs.copy()

    def final_obs(self) -> Batched:
        """The observations the last ``step`` ended in: its ``obs``, and where it ended an episode,
        gymnasium's ``final_obs`` of it (``BatchedEnv.final_obs``)."""
        obs = self._obs.copy()
        if self._final is not None:
            rows, finals = self._final
            obs[rows] = self._convert_obs(np.stack([finals[i] for i in rows]))
        return obs

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        """Advance every copy; finished ones restart in the same step (their ``obs`` is
        the first of the next episode; the last one's is ``final_obs()``)."""
        checked = self._check_action(action)
        obs, reward, terminated, truncated, infos = self._vec.step(self._to_gymnasium(checked))
        rows = np.flatnonzero(infos.get("_final_obs", ()))
        self._final = (rows, infos["final_obs"]) if rows.size else None
        reward = np.asarray(reward, dtype=np.float32)
        terminated = np.asarray(terminated, dtype=np.float32)
        truncated = np.asarray(truncated, dtype=np.float32)
        self._episodes.record(reward, self._arrays.finished_rows(terminated, truncated))
        self._steps += 1
        self._obs = self._convert_obs(obs)
        return self._obs.copy(), reward, terminated, truncated

    # -- Component API -------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self._episodes.metrics()

    def state_dict(self) -> dict[str, Any]:
        """Episode counts, the seed and the steps taken: all a gymnasium env lets us keep."""
        return {"episodes": self._episodes.state_dict(), "seed": self._seed, "steps": self._steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the episode counts and restart every episode from a seed derived from
        the checkpoint's seed and step count: reproducible, but not the episodes that
        were running when it was taken (those are dropped, not counted)."""
        missing = [k for k in ("episodes", "seed", "steps") if k not in state]
        if missing:
            raise CheckpointError(
                f"GymnasiumEnv checkpoint lacks {missing}; expected keys ['episodes', 'seed', 'steps']"
            )
        self._episodes.load_state_dict(state["episodes"])
        self._seed, self._steps = int(state["seed"]), int(state["steps"])
        self._obs = self._convert_obs(self._vec.reset(seed=_restart_seed(self._seed, self._steps))[0])
        self._final = None
        self._episodes.discard()

    def close(self) -> None:
        self._vec.close()

    def __repr__(self) -> str:
        return f"GymnasiumEnv({self.env_id!r}, num_envs={self.num_envs})"


__all__ = ["GymnasiumEnv", "ids", "knows"]
