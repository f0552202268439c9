"""Backends of one environment agree (torch vs NumPy), and the checker itself
fails on a backend that is subtly wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from msrl.envs.cartpole import CartPole
from msrl.envs.consistency import ConsistencyReport, check_consistency
from msrl.envs.pendulum import Pendulum

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def on_torch(env_cls):
    return lambda n, seed=0, **options: env_cls(n, seed=seed, backend="torch", **options)


CartPoleNumpy, CartPoleTorch = CartPole, on_torch(CartPole)
PendulumNumpy, PendulumTorch = Pendulum, on_torch(Pendulum)
PAIRS = {"cartpole": (CartPoleNumpy, CartPoleTorch), "pendulum": (PendulumNumpy, PendulumTorch)}


def pd_policy(step: int, obs: np.ndarray) -> np.ndarray:
    x, x_dot, theta, theta_dot = obs.T
    return (10 * theta + 2 * theta_dot + 0.1 * x + 0.2 * x_dot > 0).astype(np.int64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_torch_float64_matches_numpy(name, device):
    numpy_cls, torch_cls = PAIRS[name]
    # Different seeds on purpose: the checker syncs states, resets are re-synced after dones.
    report = check_consistency(numpy_cls(64, seed=1), torch_cls(64, seed=2, device=device, dtype=torch.float64), 600)
    assert report.ok, str(report)
    assert report.flag_mismatches == 0
    assert report.max_abs_error["obs"] <= 1e-6 and report.max_abs_error["reward"] <= 1e-5
    assert report.first_mismatch_step is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_torch_float32_within_tolerance(name, device):
    numpy_cls, torch_cls = PAIRS[name]
    report = check_consistency(numpy_cls(64, seed=1), torch_cls(64, seed=2, device=device), 600)
    assert report.ok, str(report)
    assert (report.atol, report.rtol, report.resync_every) == (1e-4, 1e-4, 5)
    assert 0 < report.max_abs_error["obs"] < 1e-4


def test_float64_agrees_over_whole_controlled_episodes():
    """Without periodic re-syncs: 1200 steps of balancing, i.e. two 500-step episodes per env."""
    a, b = CartPoleNumpy(32), CartPoleTorch(32, dtype=torch.float64)
    report = check_consistency(a, b, 1200, actions=pd_policy, resync_every=0)
    assert report.ok and report.max_abs_error["obs"] == 0.0, str(report)
    assert a.metrics() == b.metrics() == {"episode_return": 500.0, "episode_length": 500.0, "episodes": 64}


def test_numpy_against_itself_is_exact_with_explicit_actions():
    rng = np.random.default_rng(3)
    actions = rng.uniform(-2, 2, size=(300, 16, 1)).astype(np.float32)
    report = check_consistency(PendulumNumpy(16, seed=0), PendulumNumpy(16, seed=5), 300, actions=actions)
    assert report.ok and all(v == 0.0 for v in report.max_abs_error.values())
    assert "consistent over 300 steps x 16 envs" in str(report)


class WrongGravityCartPole(CartPole):
    gravity = 9.81


class EarlyTimeLimitPendulum(Pendulum):
    max_episode_steps = 199


WrongGravityTorch, EarlyTimeLimitTorch = on_torch(WrongGravityCartPole), on_torch(EarlyTimeLimitPendulum)


@pytest.mark.parametrize(
    "broken",
    [
        lambda: WrongGravityTorch(32, dtype=torch.float64),
        lambda: WrongGravityTorch(32, dtype=torch.float32),
        lambda: PendulumTorch(32, g=9.81),
        lambda: EarlyTimeLimitTorch(32, dtype=torch.float64),
    ],
    ids=["gravity-f64", "gravity-f32", "pendulum-g", "time-limit"],
)
def test_checker_detects_broken_backend(broken):
    env = broken()
    reference = CartPoleNumpy(32) if isinstance(env, CartPole) else PendulumNumpy(32)
    report = check_consistency(reference, env, 400)
    assert isinstance(report, ConsistencyReport)
    assert not report.ok, str(report)
    assert report.first_mismatch_step is not None and report.first_mismatch_field is not None
    assert "INCONSISTENT" in str(report)


def test_time_limit_bug_is_reported_as_flag_mismatch():
    report = check_consistency(PendulumNumpy(8), EarlyTimeLimitTorch(8, dtype=torch.float64), 250)
    assert report.flag_mismatches == 8 and report.max_abs_error["truncated"] == 1.0
    assert (report.first_mismatch_step, report.first_mismatch_field) == (199, "truncated")


def test_flag_mismatches_can_be_tolerated():
    report = check_consistency(
        PendulumNumpy(8), EarlyTimeLimitTorch(8, dtype=torch.float64), 250, max_flag_mismatch_fraction=0.01
    )
    assert report.ok and report.flag_mismatch_fraction == 8 / (250 * 8)


def test_num_envs_must_match():
    with pytest.raises(ValueError, match="num_envs"):
        check_consistency(CartPoleNumpy(4), CartPoleTorch(5), 10)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_torch_step_never_syncs_with_the_device(name):
    env = PAIRS[name][1](256, device="cuda")
    shape, dtype = ((256,), torch.int64) if name == "cartpole" else ((256, 1), torch.float32)
    action = torch.zeros(shape, dtype=dtype, device="cuda")
    env.step(action)  # warm-up (lazy CUDA initialisation may sync)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(250):  # crosses both time limits and many terminations
            env.step(action)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert env.metrics()["episodes"] > 0
