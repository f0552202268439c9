"""What every Tag-v0 backend reads: the constants (checked), the groups and spaces, the
tables the physics is built from, and how a step's pairwise work is chunked.

The rules are ``msrl.envs.tag``'s docstring.  Both physics modules
(``msrl.envs.tag``'s NumPy one and ``msrl.envs.tag._torch``) import this module and
neither imports the other; ``msrl.envs.tag.Tag`` adds the physics of each backend
and the kernels.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from msrl.core import AgentGroup, Box, ConfigError, Discrete
from msrl.envs._multi_agent import MultiAgentEnv

TWO_PI = 2 * math.pi
CHUNK_BYTES = 64 * 2**20
"""About the largest temporary a step builds (pairwise distances, gathered features)."""
SORT_MAX_AGENTS = 32
"""Up to this many agents a full stable sort picks the nearest others; above it a partition does."""


def env_chunks(num_envs: int, bytes_per_env: int, budget: int) -> Iterator[slice]:
    """Slices of the environment axis with about ``budget`` bytes of temporaries each (at least one env)."""
    size = max(1, budget // max(1, bytes_per_env))
    for lo in range(0, num_envs, size):
        yield slice(lo, min(lo + size, num_envs))


def _count(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ConfigError(f"Tag-v0 {name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _real(name: str, value: Any, condition: str = "") -> float:
    """``value`` as a finite float; ``condition`` ``"> 0"`` or ``">= 0"`` also bounds it."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    number = float(value) if ok else math.nan
    if not math.isfinite(number) or (condition == "> 0" and number <= 0) or (condition == ">= 0" and number < 0):
        raise ConfigError(f"Tag-v0 {name} must be a finite number{' ' + condition if condition else ''}, got {value!r}")
    return number


def _levels(n: int, low: float, high: float) -> list[float]:
    return [low + (k * (high - low)) / (n - 1) for k in range(n)] if n > 1 else [low]


class TagBase(MultiAgentEnv):
    """Tag without its physics: every constant is a constructor keyword argument,
    checked here (see ``msrl.envs.tag`` for what each means)."""

    env_id = "Tag-v0"
    reward_threshold = None  # a competitive game: no return means solved

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        *,
        num_taggers: int = 2,
        num_runners: int = 8,
        world_size: float = 10.0,
        max_episode_steps: int = 100,
        num_acceleration_levels: int = 3,
        min_acceleration: float = -0.5,
        max_acceleration: float = 0.5,
        num_turn_levels: int = 5,
        min_turn: float = -math.pi / 4,
        max_turn: float = math.pi / 4,
        tagger_max_speed: float = 1.0,
        runner_max_speed: float = 0.8,
        tagging_distance: float = 1.0,
        tag_reward_for_tagger: float = 1.0,
        tag_penalty_for_runner: float = -1.0,
        step_penalty_for_tagger: float = -0.01,
        step_reward_for_runner: float = 0.01,
        edge_hit_penalty: float = -0.1,
        end_of_game_reward_for_runner: float = 1.0,
        runner_exits_game_after_tagged: bool = True,
        num_observed: int = 0,
        **backend: Any,
    ) -> None:
        self.num_taggers = _count("num_taggers", num_taggers, 1)
        self.num_runners = _count("num_runners", num_runners, 1)
        self.world_size = _real("world_size", world_size, "> 0")
        self.max_episode_steps = _count("max_episode_steps", max_episode_steps, 1)
        self.num_acceleration_levels = _count("num_acceleration_levels", num_acceleration_levels, 1)
        self.min_acceleration = _real("min_acceleration", min_acceleration)
        self.max_acceleration = _real("max_acceleration", max_acceleration)
        self.num_turn_levels = _count("num_turn_levels", num_turn_levels, 1)
        self.min_turn = _real("min_turn", min_turn)
        self.max_turn = _real("max_turn", max_turn)
        for low, high in (("min_acceleration", "max_acceleration"), ("min_turn", "max_turn")):
            if getattr(self, low) > getattr(self, high):
                raise ConfigError(
                    f"Tag-v0 {low} must be <= {high}, got {getattr(self, low)!r} > {getattr(self, high)!r}"
                )
        self.tagger_max_speed = _real("tagger_max_speed", tagger_max_speed, "> 0")
        self.runner_max_speed = _real("runner_max_speed", runner_max_speed, "> 0")
        self.tagging_distance = _real("tagging_distance", tagging_distance, ">= 0")
        self.tag_reward_for_tagger = _real("tag_reward_for_tagger", tag_reward_for_tagger)
        self.tag_penalty_for_runner = _real("tag_penalty_for_runner", tag_penalty_for_runner)
        self.step_penalty_for_tagger = _real("step_penalty_for_tagger", step_penalty_for_tagger)
        self.step_reward_for_runner = _real("step_reward_for_runner", step_reward_for_runner)
        self.edge_hit_penalty = _real("edge_hit_penalty", edge_hit_penalty)
        self.end_of_game_reward_for_runner = _real("end_of_game_reward_for_runner", end_of_game_reward_for_runner)
        if not isinstance(runner_exits_game_after_tagged, (bool, np.bool_)):
            raise ConfigError(
                f"Tag-v0 runner_exits_game_after_tagged must be True or False, got {runner_exits_game_after_tagged!r}"
            )
        self.runner_exits_game_after_tagged = bool(runner_exits_game_after_tagged)
        self.num_observed = _count("num_observed", num_observed, 0)
        others = self.num_taggers + self.num_runners - 1
        self.observed = others if self.num_observed == 0 or self.num_observed >= others else self.num_observed
        """``M``, the number of others each agent observes."""
        self.state_dim = 5 * (self.num_taggers + self.num_runners) + 1
        super().__init__(num_envs, seed, **backend)

    def agent_groups(self) -> dict[str, AgentGroup]:
        obs = Box(-1.0, 1.0, (7 + 5 * self.observed,))  # every feature is in [-1, 1]
        action = Discrete(self.num_acceleration_levels * self.num_turn_levels)
        return {
            "taggers": AgentGroup("taggers", self.num_taggers, obs, action),
            "runners": AgentGroup("runners", self.num_runners, obs, action),
        }

    def active(self) -> dict[str, Any]:
        """Which agents are in the game, for the latest observation: ``{group: (num_envs,
        n_group)}`` float32, 1 in and 0 out (a runner tagged with
        ``runner_exits_game_after_tagged``), in the backend's memory.  An environment that just
        finished already shows its next episode's (every agent in).  MAPPO's active masks read
        it, so a tagged runner's later steps leave the losses."""
        T, N = self.num_taggers, self.num_taggers + self.num_runners
        flags = self.arrays.convert(self._state[:, 4 * N : 5 * N], "float32")  # a fresh copy
        return {"taggers": flags[:, :T], "runners": flags[:, T:]}

    # -- tables every backend builds its physics from (float64, NumPy) -------------------
    def action_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Acceleration and turn of each action."""
        acc = _levels(self.num_acceleration_levels, self.min_acceleration, self.max_acceleration)
        turn = _levels(self.num_turn_levels, self.min_turn, self.max_turn)
        return np.repeat(acc, len(turn)), np.tile(turn, len(acc))

    def is_tagger(self) -> np.ndarray:
        return np.arange(self.num_taggers + self.num_runners) < self.num_taggers

    def max_speeds(self) -> np.ndarray:
        return np.where(self.is_tagger(), self.tagger_max_speed, self.runner_max_speed)

    def step_rewards(self) -> np.ndarray:
        return np.where(self.is_tagger(), self.step_penalty_for_tagger, self.step_reward_for_runner)

    def other_pairs(self) -> np.ndarray:
        """``(N, N - 1)``: row ``i`` lists the pairs ``(i, j)``, ``j != i`` in index order (``j = k + (k >= i)``),
        as flat indices ``i N + j`` into an ``N x N`` table of pairs."""
        N = self.num_taggers + self.num_runners
        k, i = np.arange(N - 1)[None, :], np.arange(N)[:, None]
        return i * N + k + (k >= i)

    def kernel_defines(self) -> dict[str, object]:
        return {
            "TAG_NUM_TAGGERS": self.num_taggers,
            "TAG_NUM_RUNNERS": self.num_runners,
            "TAG_WORLD_SIZE": repr(self.world_size),
            "TAG_MAX_EPISODE_STEPS": self.max_episode_steps,
            "TAG_NUM_ACCELERATION_LEVELS": self.num_acceleration_levels,
            "TAG_MIN_ACCELERATION": repr(self.min_acceleration),
            "TAG_MAX_ACCELERATION": repr(self.max_acceleration),
            "TAG_NUM_TURN_LEVELS": self.num_turn_levels,
            "TAG_MIN_TURN": repr(self.min_turn),
            "TAG_MAX_TURN": repr(self.max_turn),
            "TAG_TAGGER_MAX_SPEED": repr(self.tagger_max_speed),
            "TAG_RUNNER_MAX_SPEED": repr(self.runner_max_speed),
            "TAG_TAGGING_DISTANCE": repr(self.tagging_distance),
            "TAG_TAG_REWARD_FOR_TAGGER": repr(self.tag_reward_for_tagger),
            "TAG_TAG_PENALTY_FOR_RUNNER": repr(self.tag_penalty_for_runner),
            "TAG_STEP_PENALTY_FOR_TAGGER": repr(self.step_penalty_for_tagger),
            "TAG_STEP_REWARD_FOR_RUNNER": repr(self.step_reward_for_runner),
            "TAG_EDGE_HIT_PENALTY": repr(self.edge_hit_penalty),
            "TAG_END_OF_GAME_REWARD_FOR_RUNNER": repr(self.end_of_game_reward_for_runner),
            "TAG_RUNNER_EXITS": int(self.runner_exits_game_after_tagged),
            "TAG_NUM_OBSERVED": self.observed,
        }


__all__ = ["CHUNK_BYTES", "SORT_MAX_AGENTS", "TWO_PI", "TagBase", "env_chunks"]
