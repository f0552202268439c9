"""Sizes no machine can hold: a run whose components would allocate more memory than
there is stops with one line while they are built, before the run directory is written, instead of
a MemoryError traceback; run-level counts are capped in the config."""

from __future__ import annotations

from pathlib import Path

import pytest

import msrl
from msrl import BuildError, ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_components_larger_than_memory_are_one_line_before_anything_is_written(tmp_path: Path) -> None:
    override = "algo.num_envs=10000000000"  # numpy: 298 GiB of env state
    with pytest.raises(BuildError) as caught:
        msrl.train(str(CONFIGS / "ppo_cartpole.yaml"), [f"runs_dir={tmp_path}", "progress=false", override])
    message = str(caught.value)
    assert "\n" not in message and "Unable to allocate" in message
    assert message.startswith("copy 0 of fragment 'local' needs more memory than there is")
    assert list(tmp_path.iterdir()) == []


def test_a_replay_larger_than_memory_says_the_bytes_it_needs_before_anything_is_written(tmp_path: Path) -> None:
    """A replay buffer is sized before it is allocated: 10^12 CartPole transitions (two observations,
    an action, a reward and a flag: 48 bytes each) are 44 TiB."""
    override = "algo.buffer_size=1000000000000"
    with pytest.raises(ConfigError) as caught:
        msrl.train(str(CONFIGS / "dqn_cartpole.yaml"), [f"runs_dir={tmp_path}", "progress=false", override])
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("a replay buffer of 1,000,000,000,000 transitions needs 44,703.5 GiB")
    assert message.endswith("available: lower algo.buffer_size")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "override, words",
    [
        ("total_env_steps=100000000000000000000", "total_env_steps must be in [1, 1e+15]"),
        ("eval_episodes=1000000000", "eval_episodes must be at most 100,000"),
    ],
)
def test_run_counts_beyond_any_machine_are_refused(override: str, words: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("+", r"\+")):
        msrl.train(str(CONFIGS / "ppo_cartpole.yaml"), [f"runs_dir={tmp_path}", override])
    assert list(tmp_path.iterdir()) == []
