"""D4RL's ``qlearning_dataset`` over an msrl dataset (README.md)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from msrl.data import read_episodes


def qlearning_dataset(env: Any = None, dataset: Any = None, **kwargs: Any) -> dict[str, np.ndarray]:
    """Every transition of the dataset at ``MSRL_CORL_DATASET`` with its next observation.  D4RL's
    files lack the observation after a time limit's cut, so its ``qlearning_dataset`` drops each
    cut episode's last step; msrl's datasets hold it, so it is kept (``terminals`` 0: bootstrapped)."""
    episodes = list(read_episodes(os.environ["MSRL_CORL_DATASET"]))
    return {
        "observations": np.concatenate([e.observations[:-1] for e in episodes]).astype(np.float32),
        "actions": np.concatenate([e.actions for e in episodes]).astype(np.float32),
        "next_observations": np.concatenate([e.observations[1:] for e in episodes]).astype(np.float32),
        "rewards": np.concatenate([e.rewards for e in episodes]).astype(np.float32),
        "terminals": np.concatenate([e.terminations for e in episodes]).astype(np.float32),
    }
