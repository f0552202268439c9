"""DQN and SAC learn with their shipped configs (fixed seed, greedy return threshold): the
off-policy half of test_algorithm_learning.py, in a file of its own so that the two test workers
share the suite's longest tests out.  Both under ``-m slow`` (DQN about 15 s, SAC about 60 s on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_algorithm_learning import learns_with_its_config

LEARNING = {"dqn_cartpole": 475.0, "sac_pendulum": -250.0}
OVERRIDES: dict[str, list[str]] = {
    "sac_pendulum": ["total_env_steps=8000", "algo.hidden_sizes=[64,64]"],  # of rl-zoo's 20k and [256, 256]
}
"""config -> its reduced budget as overrides (the shipped file keeps the reference's)."""


@pytest.mark.slow  # 15-60 s each: the suite's 6-minute budget
@pytest.mark.parametrize("name", sorted(LEARNING))
def test_off_policy_algorithm_learns_with_its_config(name: str, tmp_path: Path) -> None:
    learns_with_its_config(name, LEARNING[name], tmp_path, OVERRIDES.get(name, []))
