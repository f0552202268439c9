"""Sizes no machine can hold: a run whose components would allocate more memory than
there is stops with one line while they are built, before the run directory is written, instead of
a MemoryError traceback; run-level counts are capped in the config."""

from __future__ import annotations

from pathlib import Path

import pytest

import msrl
from msrl import BuildError, ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    "config, override, allocation",
    [
        ("ppo_cartpole", "algo.num_envs=10000000000", "Unable to allocate"),  # numpy: 298 GiB of env state
        ("dqn_cartpole", "algo.buffer_size=1000000000000", "can't allocate memory"),  # torch: a 16 TB replay buffer
    ],
    ids=["numpy-envs", "torch-replay-buffer"],
)
def test_components_larger_than_memory_are_one_line_before_anything_is_written(
    config: str, override: str, allocation: str, tmp_path: Path
) -> None:
    with pytest.raises(BuildError) as caught:
        msrl.train(str(CONFIGS / f"{config}.yaml"), [f"runs_dir={tmp_path}", "progress=false", override])
    message = str(caught.value)
    assert "\n" not in message and allocation in message
    assert message.startswith("copy 0 of fragment 'local' needs more memory than there is")
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
