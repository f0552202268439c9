"""What the simulated-cluster tests share: a few-iteration config of the quick-start PPO, and a wait
for a closed run's CPUs to come back."""

from __future__ import annotations

import time
from pathlib import Path

import ray
import yaml

from msrl.app import load_config

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml"
NUM_ENVS, NUM_STEPS = 8, 8


def small_config(policy: dict):
    """configs/ppo_cartpole.yaml for 4 iterations of 8 envs x 8 steps under ``policy``."""
    raw = yaml.safe_load(CONFIG.read_text())
    raw.update(
        total_env_steps=4 * NUM_ENVS * NUM_STEPS, progress=False, eval_episodes=0, checkpoint_every=0, policy=policy
    )
    raw["algo"] = {**raw["algo"], "num_envs": NUM_ENVS, "num_steps": NUM_STEPS}
    return load_config(None, [], base=raw)


def wait_until_idle(cpus: float, timeout_s: float = 20.0) -> None:
    """Ray frees a closed run's CPUs asynchronously; a placement decided before that (PACK is best
    effort) would see busy nodes and spread, and a feasibility check would see a smaller cluster."""
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0.0) < cpus:
        assert time.monotonic() < deadline, f"the cluster still has CPUs in use: {ray.available_resources()}"
        time.sleep(0.05)
