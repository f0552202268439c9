"""``MinAtarEnv``: ``num_envs`` MinAtar games (the ``minatar`` package's own game logic, NumPy,
one Python object a game; ``game_class`` says how it is loaded) with the rules of its ``-v1`` ids:
sticky actions with probability 0.1, the game's minimal action set, difficulty ramping.  Frames
are the games' object channels, moved channels first: ``(channels, 10, 10)`` uint8 of 0/1.
``max_episode_steps`` (10,000) cuts a game that has not ended (MinAtar has no limit of its own;
Seaquest and Freeway can play on)."""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from msrl.core import ConfigError
from msrl.envs._frames import Engine, FrameEnv, StepResult

GAMES = {
    "Asterix": "asterix",
    "Breakout": "breakout",
    "Freeway": "freeway",
    "Seaquest": "seaquest",
    "SpaceInvaders": "space_invaders",
}
"""The id's game name -> the ``minatar`` module's."""


def game_class(game: str) -> Any:
    """The ``Env`` class of ``minatar.environments.<game>``, its file loaded on its own: the
    ``minatar`` package's ``__init__`` imports its renderer's seaborn and pandas (4 s, at every run's
    start and in every worker), and a game's module needs only NumPy."""
    spec = importlib.util.find_spec("minatar")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError('MinAtar environments need minatar: pip install "msrl[atari]"')
    path = Path(list(spec.submodule_search_locations)[0]) / "environments" / f"{game}.py"
    name = f"msrl.envs.minatar._games.{game}"
    if name not in sys.modules:
        loaded = importlib.util.spec_from_file_location(name, path)
        if loaded is None or loaded.loader is None:
            raise ConfigError(f"the installed minatar has no {game} game at {path}")
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name].Env


class _Game:
    """One MinAtar game with ``minatar.Environment``'s rules: sticky actions drawn from the game's
    own generator, which ``seed`` replaces (the same stream the game's randomness draws from)."""

    def __init__(self, cls: Any, sticky: float, ramping: bool) -> None:
        self.env, self.sticky, self.last_action = cls(ramping=ramping), sticky, 0

    def seed(self, seed: int) -> None:
        self.env.random = np.random.RandomState(seed)

    def act(self, action: int) -> tuple[float, bool]:
        if self.env.random.rand() < self.sticky:
            action = self.last_action
        self.last_action = action
        reward, over = self.env.act(action)
        return float(reward), bool(over)


class _MinAtarEngine(Engine):
    def __init__(self, game: str, num_envs: int, sticky: float, ramping: bool, max_steps: int) -> None:
        cls = game_class(game)
        self.games = [_Game(cls, sticky, ramping) for _ in range(num_envs)]
        self.action_set = np.asarray(self.games[0].env.minimal_action_set(), dtype=np.int64)
        self.max_steps = max_steps
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.lives = np.ones(num_envs, dtype=np.int64)  # MinAtar's games have one life

    def _frames(self) -> np.ndarray:
        return np.stack([game.env.state() for game in self.games]).transpose(0, 3, 1, 2).astype(np.uint8)

    def reset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        for index, game in enumerate(self.games):
            game.seed(seed + index)
            game.env.reset()
        self.length[:] = 0
        return self._frames(), self.lives

    def step(self, actions: np.ndarray) -> StepResult:
        count = len(self.games)
        reward, over = np.zeros(count, np.float32), np.zeros(count, bool)
        for index, action in enumerate(self.action_set[actions].tolist()):
            reward[index], over[index] = self.games[index].act(action)
        self.length += 1
        truncated = ~over & (self.length >= self.max_steps)
        ended = over | truncated
        final = self._frames() if ended.any() else None
        for row in np.flatnonzero(ended).tolist():
            self.games[row].env.reset()
        self.length[ended] = 0
        return self._frames(), reward, over, truncated, final, self.lives


class MinAtarEnv(FrameEnv):
    """``num_envs`` games of ``env_id`` (``MinAtar/<Game>-v1``) stepped together.

    Example::

        >>> env = MinAtarEnv("MinAtar/Breakout-v1", num_envs=2, seed=0)
        >>> env.observe().shape, env.action_space
        ((2, 4, 10, 10), Discrete(n=3))
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int = 0,
        *,
        sticky_action_prob: float = 0.1,
        difficulty_ramping: bool = True,
        max_episode_steps: int = 10_000,
    ) -> None:
        match = re.fullmatch(r"MinAtar/(\w+)-v1", env_id)
        name = match.group(1) if match else env_id
        if name not in GAMES:
            close = difflib.get_close_matches(name, list(GAMES), n=3, cutoff=0.5)
            choices = ", ".join(f"MinAtar/{g}-v1" for g in (close or GAMES))
            raise ConfigError(f"MinAtar has no game {name!r} for {env_id!r}; valid choices: {choices}")
        options = (float(sticky_action_prob), bool(difficulty_ramping), int(max_episode_steps))
        engine = _MinAtarEngine(GAMES[name], int(num_envs), *options)
        channels = engine.games[0].env.state_shape()[2]
        super().__init__(
            env_id,
            num_envs,
            seed,
            engine,
            (channels, 10, 10),
            len(engine.action_set),
            reward_clipping=False,
            episodic_life=False,
            high=1,
        )
        self.reward_threshold: float | None = None


__all__ = ["GAMES", "MinAtarEnv"]
