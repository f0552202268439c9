"""What every ``simple_spread_v3`` backend reads: ``mpe2``'s constants, the
constructor's checks, the group and its spaces (the rules are
``msrl.envs.simple_spread``'s docstring).

Both physics modules (``msrl.envs.simple_spread``'s NumPy one and
``msrl.envs.simple_spread._torch``) import this module and neither imports the
other; ``msrl.envs.simple_spread.SimpleSpread`` adds the physics of each backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from msrl.core import AgentGroup, Box, ConfigError, Discrete
from msrl.envs._multi_agent import MultiAgentEnv


class SimpleSpreadBase(MultiAgentEnv):
    """``simple_spread_v3`` without its physics: constants, ``N``, ``local_ratio``,
    ``max_cycles``, ``continuous_actions`` and the MAPPO fork's three rules
    (``landmark_range``, ``shared_reward``, ``integrator``), checked."""

    env_id = "simple_spread_v3"
    reward_threshold = None  # PettingZoo registers no thresholds; none is agreed for this task

    # mpe2's World and Scenario constants
    dt = 0.1
    damping = 0.25
    contact_force = 100.0
    contact_margin = 1e-3
    size = 0.15  # every agent's radius
    sensitivity = 5.0  # mpe2's default acceleration
    moves = ((0.0, 0.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0))  # discrete action -> direction
    integrators = ("explicit", "semi-implicit")  # mpe2's order; the original MPE's and the MAPPO fork's

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        *,
        N: int = 3,
        local_ratio: float = 0.5,  # noqa: N803
        max_cycles: int = 25,
        continuous_actions: bool = False,
        landmark_range: float = 1.0,
        shared_reward: bool = False,
        integrator: str = "explicit",
        **backend: Any,
    ) -> None:
        if not isinstance(N, (int, np.integer)) or isinstance(N, bool) or N < 1:
            raise ConfigError(f"simple_spread_v3 needs N >= 1 agents, got N={N!r}")
        if not 0.0 <= local_ratio <= 1.0:
            raise ConfigError(f"simple_spread_v3 local_ratio is a proportion in [0, 1], got {local_ratio!r}")
        if not isinstance(max_cycles, (int, np.integer)) or isinstance(max_cycles, bool) or max_cycles < 1:
            raise ConfigError(f"simple_spread_v3 max_cycles must be a positive integer, got {max_cycles!r}")
        if not isinstance(landmark_range, (int, float)) or isinstance(landmark_range, bool):
            raise ConfigError(f"simple_spread_v3 landmark_range must be a number, got {landmark_range!r}")
        if not 0.0 < landmark_range < np.inf:
            raise ConfigError(f"simple_spread_v3 landmark_range must be positive and finite, got {landmark_range!r}")
        if not isinstance(shared_reward, bool):
            raise ConfigError(f"simple_spread_v3 shared_reward must be true or false, got {shared_reward!r}")
        if integrator not in self.integrators:
            raise ConfigError(
                f"unknown simple_spread_v3 integrator {integrator!r}; valid choices: {', '.join(self.integrators)}"
            )
        self.landmark_range = float(landmark_range)
        self.shared_reward = shared_reward
        self.velocity_first = integrator == "semi-implicit"
        self.N = int(N)
        self.local_ratio = float(local_ratio)
        self.max_episode_steps = int(max_cycles)
        self.continuous_actions = bool(continuous_actions)
        self.state_dim = 6 * self.N
        self.dist_min = self.size + self.size  # as mpe2 adds the two radii
        super().__init__(num_envs, seed, **backend)

    def agent_groups(self) -> dict[str, AgentGroup]:
        obs = Box(low=-np.inf, high=np.inf, shape=(6 * self.N,), dtype="float32")
        action = Box(low=0.0, high=1.0, shape=(5,), dtype="float32") if self.continuous_actions else Discrete(5)
        return {"agents": AgentGroup("agents", self.N, obs, action)}


__all__ = ["SimpleSpreadBase"]
