"""``FrameEnv``: the part of a pixel environment that does not depend on the emulator.

A game engine (ale-py's vector of Atari emulators, MinAtar's games) gives a batch of uint8 frames,
raw rewards and the end of each game.  What msrl adds is written once here:

* observations stay uint8 from the engine to the network (``Box(0, high, shape, "uint8")``, ``high``
  255 for grey levels, 1 for MinAtar's object bits: what a network divides by): a
  4x84x84 Atari observation is 28 KB, not the 113 KB of float32, in the rollout, on cut edges and
  in replay; the network scales them;
* ``reward_clipping``: the rewards returned are clipped to their sign (DQN's rule, which PPO and
  IMPALA keep for Atari), while the episode returns reported in ``metrics()`` are the game's score;
* ``episodic_life``: a lost life ends the episode for the learner (``terminated`` 1, no bootstrap
  through it) but not the game: play continues from the frame returned, and ``metrics()`` counts
  whole games (the "episodic life" of the DQN paper's Atari setup, as CleanRL and SB3 apply it);
* ``frame_stack``: where an observation is the last frames of one game along its first axis (Atari's
  4-frame stack), the environment says so (``EnvSpec.frame_stack``), and a replay buffer stores each
  frame once (``msrl.rl.FrameReplayBuffer``); MinAtar's channels are objects, not time (0);
* actions checked by ``ActionCheck``, episodes by ``EpisodeTracker``, same-step autoreset with the
  last frame of an ended game in ``final_obs()``;
* checkpoints keep the episode counts, the seed and the steps taken; ``load_state_dict`` restarts
  every game from a seed derived from both (an emulator's state is not kept), as ``GymnasiumEnv``
  does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from msrl.core import Batched, Box, CheckpointError, Discrete, Environment
from msrl.envs._actions import ActionCheck
from msrl.envs._base import check_num_envs
from msrl.envs._episodes import EpisodeTracker
from msrl.envs._numpy_arrays import NumpyArrays


def restart_seed(seed: int, steps: int) -> int:
    """The seed games restart from after a checkpoint taken ``steps`` steps into a run seeded
    ``seed``: a function of both, so restarts are reproducible but do not replay the first games."""
    return int(np.random.SeedSequence([seed & (2**64 - 1), steps]).generate_state(1)[0] >> 1)


StepResult = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None", np.ndarray]
"""An engine's step: frames, raw rewards, game over, truncated, final frames (or None), lives."""


class Engine:
    """What a ``FrameEnv`` steps: ``num_envs`` games with same-step autoreset."""

    def reset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Start every game from ``seed`` (game ``i`` from ``seed + i``): ``(frames, lives)``."""
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> StepResult:
        """``(frames, raw rewards, game over, truncated, final frames or None, lives)``; a game that
        ended restarts in the same step, ``final frames`` holding its last frame (its other rows
        are unspecified), None when no game ended."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class FrameEnv(Environment):
    """``num_envs`` games of an ``Engine`` as an msrl environment (see the module's docstring)."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        engine: Engine,
        frame_shape: tuple[int, ...],
        actions: int,
        *,
        reward_clipping: bool,
        episodic_life: bool,
        high: int = 255,
        frame_stack: int = 0,
    ) -> None:
        self.env_id, self.num_envs = env_id, check_num_envs(num_envs)
        self.observation_space = Box(low=0, high=high, shape=tuple(frame_shape), dtype="uint8")
        self.action_space = Discrete(int(actions))
        self.reward_clipping, self.episodic_life = bool(reward_clipping), bool(episodic_life)
        self.frame_stack = int(frame_stack)  # observations are the last `frame_stack` frames (0: not a stack)
        self._engine = engine
        self._arrays = NumpyArrays()
        self._check_action = ActionCheck(env_id, self.action_space, self.num_envs, self._arrays)
        self._episodes = EpisodeTracker(self._arrays, self.num_envs)
        self._seed, self._steps = int(seed), 0
        self._start(self._seed)

    def _start(self, seed: int) -> None:
        self._obs, self._lives = self._engine.reset(seed)
        self._final: np.ndarray | None = None  # the last step's final frames, where a game ended
        self._ended = np.zeros(self.num_envs, dtype=bool)  # the rows whose episode the last step ended
        self._episodes.discard()

    # -- Environment API ---------------------------------------------------------
    def reset(self, seed: int | None = None) -> Batched:
        """Start a new game everywhere; ``reset(seed=s)`` equals a fresh environment seeded ``s``."""
        if seed is not None:
            self._seed, self._steps = int(seed), 0
        self._start(self._seed if seed is not None else restart_seed(self._seed, self._steps))
        return self._obs

    def observe(self) -> Batched:
        return self._obs

    def final_obs(self) -> Batched:
        """The frames the last ``step`` ended in: its ``obs``, and where a game ended, that game's
        last frames (``BatchedEnv.final_obs``); a life lost under ``episodic_life`` plays on from
        the frame returned, which is therefore its own final one."""
        if self._final is None:
            return self._obs
        obs = self._obs.copy()
        obs[self._ended] = self._final[self._ended]
        return obs

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        """Advance every game one agent step; the frames are the engine's own array (no copy)."""
        checked = np.asarray(self._check_action(action), dtype=np.int64)
        obs, raw, over, truncated, final, lives = self._engine.step(checked)
        raw = np.asarray(raw, dtype=np.float32)
        over, truncated = np.asarray(over, dtype=bool), np.asarray(truncated, dtype=bool)
        self._episodes.record(raw, self._arrays.finished_rows(over, truncated))
        lost_life = (lives < self._lives) & ~truncated
        terminated = over | lost_life if self.episodic_life else over
        self._ended = over | truncated
        self._final = final if self._ended.any() else None
        self._obs, self._lives = obs, lives
        self._steps += 1
        reward = np.sign(raw) if self.reward_clipping else raw
        return obs, reward, terminated.astype(np.float32), truncated.astype(np.float32)

    # -- Component API -------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self._episodes.metrics()

    def state_dict(self) -> dict[str, Any]:
        """Episode counts, the seed and the steps taken (an emulator's state is not kept)."""
        return {"episodes": self._episodes.state_dict(), "seed": self._seed, "steps": self._steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the episode counts and restart every game from a seed derived from the
        checkpoint's seed and step count (the games running when it was taken are not counted)."""
        missing = [k for k in ("episodes", "seed", "steps") if k not in state]
        if missing:
            raise CheckpointError(
                f"{type(self).__name__} checkpoint lacks {missing}; expected keys ['episodes', 'seed', 'steps']"
            )
        self._seed, self._steps = int(state["seed"]), int(state["steps"])
        self._episodes.load_state_dict(state["episodes"])
        self._start(restart_seed(self._seed, self._steps))  # drops the games that were running

    def close(self) -> None:
        self._engine.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs})"


__all__ = ["Engine", "FrameEnv", "StepResult", "restart_seed"]
