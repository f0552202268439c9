"""``AtariEnv``: ``ALE/<Game>-v5`` on ale-py's ``AtariVectorEnv``, with the v5 rules and the
preprocessing of the DQN paper, done in C++ by ale-py.

Defaults are gymnasium's v5 rules plus the standard preprocessing (Machado et al. 2018; Mnih et al.
2015), which gymnasium's ``AtariPreprocessing`` and ``FrameStackObservation`` apply to the same
emulator (``tests/unit/test_atari.py`` holds the two together, frame for frame):

* sticky actions (``repeat_action_probability`` 0.25), the minimal action set
  (``full_action_space`` false), at most 108,000 frames a game (``max_episode_frames``);
* ``frameskip`` 4 with the last two frames max-pooled, grayscale, 84x84 (``img_size``), the last
  ``stack`` 4 frames stacked: observations ``(stack, img_size, img_size)`` uint8;
* up to ``noop_max`` 30 no-op actions at the start of each game;
* ``fire_reset`` (off): press FIRE at the start of each game, for games that wait for it;
* ``episodic_life`` (off) and ``reward_clipping`` (on): ``msrl.envs._frames.FrameEnv``'s.

``threads``: the C++ threads the emulators step on (the executor's, through ``msrl.envs.make``);
0 lets ale-py choose.  One agent step is ``frameskip`` frames.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import numpy as np

from msrl.core import ConfigError
from msrl.envs._frames import Engine, FrameEnv, StepResult

EXTRA_HINT = 'pip install "msrl[atari]" (ale-py, which ships the ROMs)'


def game_of(env_id: str) -> str:
    """ale-py's ROM name of ``ALE/<Game>-v5``: ``"ALE/MontezumaRevenge-v5"`` -> ``montezuma_revenge``."""
    match = re.fullmatch(r"ALE/(\w+)-v5", env_id)
    if match is None:
        raise ConfigError(f"{env_id!r} is not an Atari id; Atari ids are ALE/<Game>-v5, e.g. ALE/Pong-v5")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", match.group(1)).lower()


def _rom_ids() -> list[str]:
    try:
        from ale_py import roms
    except ImportError:
        raise ConfigError(f"Atari environments need ale-py, which is not installed: {EXTRA_HINT}") from None
    return list(roms.get_all_rom_ids())


def _camel(game: str) -> str:
    return "".join(part.title() for part in game.split("_"))


class _ALEEngine(Engine):
    """ale-py's vector of emulators, same-step autoreset, raw rewards and no life handling of its
    own (``FrameEnv`` applies episodic life and clipping)."""

    def __init__(self, game: str, num_envs: int, threads: int, options: dict[str, Any]) -> None:
        from ale_py.vector_env import AtariVectorEnv

        self.vec = AtariVectorEnv(
            game, num_envs, num_threads=threads, autoreset_mode="SameStep", reward_clipping=False, **options
        )

    def reset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        obs: Any
        obs, info = self.vec.reset(seed=seed)
        return np.asarray(obs), np.asarray(info["lives"])

    def step(self, actions: np.ndarray) -> StepResult:
        obs, reward, terminated, truncated, info = self.vec.step(actions)
        return obs, reward, terminated, truncated, info.get("final_obs"), info["lives"]

    def close(self) -> None:
        self.vec.close()


class AtariEnv(FrameEnv):
    """``num_envs`` games of ``env_id`` (``ALE/<Game>-v5``) stepped together; see the module's
    docstring for the options.  ``evaluation_kwargs``: what a greedy evaluation sets, so that it
    scores whole games with their own rewards whatever training clipped or cut.

    Example::

        >>> env = AtariEnv("ALE/Pong-v5", num_envs=2, seed=0)
        >>> obs, reward, terminated, truncated = env.step(np.zeros(2, np.int64))
        >>> obs.dtype, obs.shape, env.action_space
        (dtype('uint8'), (2, 4, 84, 84), Discrete(n=6))
    """

    evaluation_kwargs = {"reward_clipping": False, "episodic_life": False}

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int = 0,
        *,
        repeat_action_probability: float = 0.25,
        full_action_space: bool = False,
        frameskip: int = 4,
        noop_max: int = 30,
        stack: int = 4,
        img_size: int = 84,
        fire_reset: bool = False,
        episodic_life: bool = False,
        reward_clipping: bool = True,
        max_episode_frames: int = 108_000,
        threads: int = 1,
    ) -> None:
        game, known = game_of(env_id), _rom_ids()
        if game not in known:
            close = difflib.get_close_matches(_camel(game), [_camel(g) for g in known], n=3, cutoff=0.6)
            hint = ", ".join(f"ALE/{c}-v5" for c in close) if close else f"{len(known)} games, e.g. ALE/Pong-v5"
            raise ConfigError(f"ale-py has no game {game!r} for {env_id!r}; close matches: {hint}")
        for name, value, least in (("frameskip", frameskip, 1), ("stack", stack, 1), ("img_size", img_size, 8)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"{env_id}: {name} must be an integer >= {least}, got {value!r}")
        if not 0.0 <= repeat_action_probability <= 1.0:
            raise ConfigError(f"{env_id}: repeat_action_probability must be in [0, 1], got {repeat_action_probability}")
        options = {
            "repeat_action_probability": float(repeat_action_probability),
            "full_action_space": bool(full_action_space),
            "frameskip": frameskip,
            "noop_max": int(noop_max),
            "stack_num": stack,
            "img_height": img_size,
            "img_width": img_size,
            "use_fire_reset": bool(fire_reset),
            "max_num_frames_per_episode": int(max_episode_frames),
        }
        engine = _ALEEngine(game, int(num_envs), int(threads), options)
        actions = int(engine.vec.single_action_space.n)  # type: ignore[attr-defined]
        super().__init__(
            env_id,
            num_envs,
            seed,
            engine,
            (stack, img_size, img_size),
            actions,
            reward_clipping=reward_clipping,
            episodic_life=episodic_life,
            frame_stack=stack,
        )
        self.reward_threshold: float | None = None


__all__ = ["AtariEnv", "EXTRA_HINT", "game_of"]
