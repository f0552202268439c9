"""``algo.bootstrap_time_limits`` in whole runs: SAC on Pendulum (cut at 200 steps) stores every
transition, the time-limited ones with their last observations, where it otherwise drops one in
200; under a Ray policy too, whose env and buffer copies hold it per replica; and on the fused
kernels, which cannot give the last observation, it drops them as before."""

from __future__ import annotations

from pathlib import Path

import pytest

import msrl
from msrl.app import load_checkpoint

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "sac_pendulum.yaml")
STEPS = 400  # two Pendulum episodes per environment, in one iteration


def _buffers(tmp_path: Path, name: str, *sets: str) -> list[dict]:
    """Every replay buffer copy's state after a run of ``STEPS`` steps without learning."""
    overrides = [f"runs_dir={tmp_path}", f"name={name}", f"total_env_steps={STEPS}", "eval_episodes=1"]
    overrides += ["progress=false", f"algo.learning_starts={10 * STEPS}", f"algo.train_frequency={STEPS}", *sets]
    components = load_checkpoint(msrl.train(CONFIG, overrides).checkpoint)["components"]
    replicas = components.get("_replicas", {})
    copies = [r["buffer"] for fragment in replicas.values() for r in fragment if "buffer" in r]
    return copies or [components["buffer"]]


@pytest.mark.parametrize(
    "sets, stored",
    [
        (["algo.bootstrap_time_limits=true"], STEPS),
        (["algo.bootstrap_time_limits=false"], STEPS - 2),
        (["algo.bootstrap_time_limits=true", "policy.executor=cpu-kernel"], STEPS - 2),
    ],
    ids=["kept", "dropped", "kernels-drop"],
)
def test_a_local_run_stores_the_time_limited_transitions(tmp_path: Path, sets: list[str], stored: int) -> None:
    (buffer,) = _buffers(tmp_path, "run", *sets)
    assert (buffer["inserted"], buffer["size"]) == (STEPS, stored)
    assert (buffer["terminated"] == 0).all()  # Pendulum never terminates: a kept cut row bootstraps


@pytest.mark.slow  # about 20 s of Ray workers starting on 2 cores: the default suite keeps the local runs above
def test_under_a_ray_policy_each_buffer_copy_keeps_them(tmp_path: Path) -> None:
    copies = _buffers(
        tmp_path,
        "coarse",
        "policy=single_learner_coarse",
        "algo.num_envs=2",
        f"total_env_steps={2 * STEPS}",
        "algo.bootstrap_time_limits=true",
    )  # one iteration of 400 steps in each of the 2 rollout copies
    assert [(b["inserted"], b["size"]) for b in copies] == [(STEPS, STEPS)] * 2
