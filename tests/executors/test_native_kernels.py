"""The ``cpu-kernel`` backend: msrl's CUDA kernels compiled natively for the CPU
(``fragments.native``).  In float64 it matches the NumPy backends bit for bit
(episode ends, same-step autoresets and truncations included), in float32 it runs
exactly the emulation's arithmetic, several OpenMP threads give the same bits as
one, checkpoints resume exactly, and a machine that cannot build the kernels gets
one ``ConfigError`` line (or, asked for, the NumPy backend and one line saying so).

Every build goes to a temporary MSRL_CACHE_DIR, once per configuration.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from kernel_support import CROWDED, same_bits

import msrl.envs
from fragments.cuda import emulated_env
from fragments.native import PARALLEL_MIN_THREADS, FusedStep, native_env
from msrl.core import ConfigError, EnvDefaults, EnvError
from msrl.envs.cartpole import CartPole
from msrl.envs.consistency import check_consistency
from msrl.envs.pendulum import Pendulum
from msrl.envs.tag import Tag

# The cpu-kernel backend of each environment (and CartPole's cuda-emulated one, to compare with).
cartpole_native, pendulum_native, tag_native = (functools.partial(native_env, cls) for cls in (CartPole, Pendulum, Tag))
cartpole_emulated = functools.partial(emulated_env, CartPole)

pytestmark = pytest.mark.usefixtures("kernel_cache")

TAG = {**CROWDED, "num_runners": 37, "num_observed": 6}  # 40 agents: many per block on a GPU, one thread here


class CountingEnds:
    """``env`` with its episode ends counted, so a test can tell that resets were compared."""

    def __init__(self, env: Any) -> None:
        self.env, self.terminated, self.truncated = env, 0, 0

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.terminated += int(out[2].sum())
        self.truncated += int(out[3].sum())
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def balancing(t: int, obs: np.ndarray) -> np.ndarray:
    """A balancing controller for CartPole, noisier towards the last envs: the first envs
    reach the 500-step time limit, the last ones fall often."""
    x, x_dot, theta, theta_dot = obs.T
    action = (10 * theta + 2 * theta_dot + 0.1 * x + 0.2 * x_dot > 0).astype(np.int64)
    flip = np.random.default_rng(t).random(action.shape) < np.linspace(0.0, 0.4, action.shape[0])
    return np.where(flip, 1 - action, action)


def exact(reference: Any, native: Any, steps: int, actions: Any = None) -> CountingEnds:
    """Lockstep with zero tolerance: every reward, flag and observation equal."""
    counted = CountingEnds(native)
    report = check_consistency(reference, counted, steps, actions, seed=3, atol=0.0, rtol=0.0, resync_every=0)
    assert report.ok, str(report)
    assert max(report.max_abs_error.values()) == 0.0
    return counted


def test_registered_for_the_three_kernel_envs():
    for env_id in ("CartPole-v1", "Pendulum-v1", "Tag-v0"):
        assert "cpu-kernel" in msrl.envs.backends(env_id)
    env = msrl.envs.make("CartPole-v1", num_envs=4, seed=0, backend="cpu-kernel", dtype=np.float64)
    assert env.spec.backend == "cpu-kernel" and env.dtype == np.float64
    assert "kernels" in repr(env)


def test_cartpole_float64_equals_numpy_bit_for_bit():
    counted = exact(CartPole(32, seed=1), cartpole_native(32, seed=2, dtype=np.float64), 520, balancing)
    assert counted.terminated > 20 and counted.truncated > 0  # both kinds of end were compared


def test_pendulum_float64_equals_numpy_bit_for_bit():
    actions = [np.random.default_rng(t).uniform(-2.5, 2.5, (16, 1)).astype(np.float32) for t in range(230)]
    counted = exact(Pendulum(16, seed=1), pendulum_native(16, seed=2, dtype=np.float64), 230, actions)
    assert counted.truncated == 16 and counted.terminated == 0  # the 200-step limit, clipped torques


def test_tag_float64_equals_numpy_bit_for_bit_with_more_agents_than_a_block_thread():
    native = tag_native(6, seed=2, dtype=np.float64, **TAG)
    assert native.dynamics.block == (1, 1, 1) and native.num_agents == 40
    counted = exact(Tag(6, seed=1, **TAG), native, 75)
    assert counted.terminated + counted.truncated >= 6  # the 30-step limit at least


def test_float32_is_the_emulations_arithmetic_bit_for_bit():
    """Same source, same Philox draws: a float32 native run equals the float32 emulation
    exactly, resets included, without any re-sync."""
    native, emulated = cartpole_native(48, seed=7), cartpole_emulated(48, seed=7)
    same_bits(native.get_state(), emulated.get_state(), "reset state")
    ends = 0
    for t in range(120):
        action = np.random.default_rng(t).integers(0, 2, 48)
        a, b = native.step(action), emulated.step(action)
        for i, name in enumerate(("obs", "reward", "terminated", "truncated")):
            same_bits(a[i], b[i], f"step {t}: {name}")
        ends += int(a[2].sum())
    same_bits(native.get_state(), emulated.get_state(), "final state")
    assert ends > 48 and native.dtype == np.float32
    report = check_consistency(CartPole(48, seed=1), cartpole_native(48, seed=3), 300)
    assert report.ok, str(report)  # and within the float32 tolerance of NumPy's float64


def test_two_threads_give_the_same_bits_as_one():
    n = PARALLEL_MIN_THREADS + 3  # large enough to be split, not evenly
    one, two = cartpole_native(n, seed=4, dtype=np.float64), cartpole_native(n, seed=4, dtype=np.float64, threads=2)
    assert two.dynamics.launcher.threads == 2
    tag_one = tag_native(5, seed=4, dtype=np.float64, **TAG)
    tag_two = tag_native(5, seed=4, dtype=np.float64, threads=2, **TAG)
    for t in range(30):
        action = np.random.default_rng(t).integers(0, 2, n)
        for a, b in zip(one.step(action), two.step(action)):
            same_bits(a, b, f"cartpole step {t}")
        acts = {g: np.random.default_rng(t).integers(0, 9, (5, grp.num_agents)) for g, grp in tag_one.groups.items()}
        tag_one.step(acts), tag_two.step(acts)
    same_bits(one.get_state(), two.get_state(), "cartpole state")
    same_bits(tag_one.get_state(), tag_two.get_state(), "tag state")


def test_checkpoint_resumes_exactly():
    env = cartpole_native(16, seed=5, dtype=np.float64)
    for t in range(40):
        env.step(np.random.default_rng(t).integers(0, 2, 16))
    snapshot = env.state_dict()
    resumed = cartpole_native(16, seed=99, dtype=np.float64)
    resumed.load_state_dict(snapshot)
    for t in range(40, 100):
        action = np.random.default_rng(t).integers(0, 2, 16)
        for a, b in zip(env.step(action), resumed.step(action)):
            same_bits(a, b, f"step {t}")
    assert env.metrics() == resumed.metrics() != {}


def test_a_barrier_kernel_with_several_threads_per_block_is_refused():
    with pytest.raises(ConfigError, match=r"tag_step \(which may reach __syncthreads\(\)\) with one thread per"):
        tag_native(2, threads_per_block=4, **TAG)
    launcher = tag_native(2, **TAG).dynamics.launcher  # and the launcher itself refuses
    with pytest.raises(ConfigError, match=r"tag_step may reach __syncthreads\(\).*got block=\(2, 1, 1\)"):
        launcher.launch("tag_step", (2, 1, 1), (2, 1, 1), [None] * 13)


def test_bad_arguments_get_the_emulations_messages():
    launcher = cartpole_native(4, dtype=np.float64).dynamics.launcher
    state = np.zeros((4, 4))
    with pytest.raises(TypeError, match="must have dtype float64"):
        launcher.launch("cartpole_reset", (4, 1, 1), (1, 1, 1), [state.astype(np.float32), 4, 0, 0])
    with pytest.raises(TypeError, match="C-contiguous"):
        launcher.launch("cartpole_reset", (4, 1, 1), (1, 1, 1), [np.zeros((4, 8))[:, ::2], 4, 0, 0])
    with pytest.raises(OverflowError, match="does not fit unsigned long long"):
        launcher.launch("cartpole_reset", (4, 1, 1), (1, 1, 1), [state, 4, -1, 0])
    launcher.launch("cartpole_reset", (4, 1, 1), (1, 1, 1), [state, 4, 0, 0])
    assert np.abs(state).max() > 0


@pytest.mark.parametrize("cxx", ["/nonexistent/g++", "false"])
def test_no_compiler_is_one_config_error_line(monkeypatch, cxx):
    monkeypatch.setenv("CXX", cxx)
    with pytest.raises(ConfigError) as caught:  # g is compiled in: a configuration never built before
        msrl.envs.make("Pendulum-v1", num_envs=2, backend="cpu-kernel", g=9.5 if cxx == "false" else 9.25)
    message = str(caught.value)
    assert "\n" not in message and "'cpu-kernel' is unavailable" in message and "backend='numpy'" in message
    assert ("not on PATH" in message) if cxx.startswith("/") else ("failed" in message)


def test_fallback_builds_numpy_and_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    env = msrl.envs.make("Pendulum-v1", num_envs=3, seed=1, backend="cpu-kernel", g=9.75, fallback=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msrl: ") and "using the NumPy backend" in lines[0]
    assert env.dynamics.name != "kernels" and env.dtype == np.float64 and env.g == 9.75
    env.step(np.zeros((3, 1), np.float32))


def test_threads_and_fallback_come_from_the_defaults_make_is_given(monkeypatch, capsys):
    """``make`` passes the executor's threads to the kernels, and falls back to NumPy only where
    the executor prefers ``cpu-kernel``; without defaults, one thread and no fallback."""
    threaded = msrl.envs.make("CartPole-v1", 8, backend="cpu-kernel", defaults=EnvDefaults(threads=2))
    assert threaded.dynamics.launcher.threads == 2
    assert msrl.envs.make("CartPole-v1", 8, backend="cpu-kernel").dynamics.launcher.threads == 1
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    preferred = EnvDefaults(backends=("cpu-kernel",), device="cpu", threads=2)
    env = msrl.envs.make("Pendulum-v1", 3, g=9.625, defaults=preferred)  # g: a build this run has not made
    assert env.spec.backend == "cpu-kernel" and env.dynamics.name != "kernels"
    assert "using the NumPy backend" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="'cpu-kernel' is unavailable"):
        msrl.envs.make("Pendulum-v1", 3, backend="cpu-kernel", g=9.625)


def test_fused_step_equals_the_checked_path_and_falls_back_to_it():
    """CartPole's one-call step (action check, kernel, episode bookkeeping in C) gives
    what ``BatchedEnv.step`` on the same kernels gives, metrics and checkpoints included;
    other action types take the checked path, and a bad action gets its error."""
    fused = cartpole_native(24, seed=6, dtype=np.float64)
    plain = cartpole_native(24, seed=6, dtype=np.float64, fused_step=False)
    assert isinstance(fused, FusedStep) and isinstance(fused, CartPole) and fused._fused is not None
    assert type(plain) is CartPole
    # Box actions (a float step kernel) have no one-call step: the checked path throughout.
    assert pendulum_native(4, dtype=np.float64)._fused is None
    for t in range(300):
        action = np.random.default_rng(t).integers(0, 2, 24)
        if t % 50 == 7:
            action = action.astype(np.int32)  # not the fused path's dtype: the checked path
        for a, b in zip(fused.step(action), plain.step(action)):
            same_bits(a, b, f"step {t}")
        if t % 100 == 99:
            assert fused.metrics() == plain.metrics() != {}
    state_fused, state_plain = fused.state_dict(), plain.state_dict()
    for key, value in state_plain["episodes"].items():
        np.testing.assert_array_equal(np.asarray(state_fused["episodes"][key]), np.asarray(value), err_msg=key)
    bad = np.zeros(24, np.int64)
    bad[5] = 2
    with pytest.raises(EnvError, match=r"CartPole-v1 actions must be .*got values in \[0, 2\]"):
        fused.step(bad)
    same_bits(fused.get_state(), plain.get_state(), "state after the refused step")
