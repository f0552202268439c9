"""The single-agent environments built on CUDA C kernels (CartPole, Pendulum): run on the
CPU through the emulation of the CUDA execution model, they match the NumPy backends (bit
for bit in double, within the documented tolerance in float), autoreset on the device,
resume exactly from checkpoints and seeds; the cuda backend's host code runs on the
emulation too.  The GPU tests at the end run
the pycuda backends and are skipped on machines without pycuda or a GPU.

Every build goes to a temporary MSRL_CACHE_DIR, once per configuration.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest
import torch
from kernel_support import HAS_GPU, HAS_PYCUDA, EmulatedTorchModule, needs_gpu, same_bits

from fragments.cuda import emulated_env
from msrl.core import ConfigError
from msrl.envs.cartpole import CartPole
from msrl.envs.consistency import check_consistency
from msrl.envs.pendulum import Pendulum

pytestmark = pytest.mark.usefixtures("kernel_cache")

CartPoleNumpy, PendulumNumpy = CartPole, Pendulum
CartPoleEmulated, PendulumEmulated = (functools.partial(emulated_env, cls) for cls in (CartPole, Pendulum))


def pd_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A balancing controller whose actions are flipped with a probability
    from 0 (first env) to 0.4 (last env): the first envs reach the 500-step
    time limit, the last ones terminate often."""
    x, x_dot, theta, theta_dot = obs.T
    action = (10 * theta + 2 * theta_dot + 0.1 * x + 0.2 * x_dot > 0).astype(np.int64)
    flip = rng.random(action.shape) < np.linspace(0.0, 0.4, action.shape[0])
    return np.where(flip, 1 - action, action)


# -- environments: emulation vs NumPy -------------------------------------------------------


def _lockstep_exact(reference, emulated, steps, act):
    """Step both from the same float64 state with the same actions; everything
    must be bit-identical, including the float64 state.  Envs whose episode
    ended are re-synced (each backend draws its reset states from its own RNG)."""
    reference.set_state(reference.get_state())
    emulated.set_state(reference.get_state())
    obs = reference.observe()
    same_bits(obs, emulated.observe(), "initial obs")
    ends = {"terminated": 0, "truncated": 0}
    for t in range(steps):
        action = act(t, obs)
        ref = reference.step(action.copy())
        emu = emulated.step(action.copy())
        for name, i in (("reward", 1), ("terminated", 2), ("truncated", 3)):
            same_bits(ref[i], emu[i], f"step {t}: {name}")
        done = (ref[2] + ref[3]) > 0
        ends["terminated"] += int(ref[2].sum())
        ends["truncated"] += int(ref[3].sum())
        same_bits(ref[0][~done], emu[0][~done], f"step {t}: obs")
        same_bits(reference.get_state()[~done], emulated.get_state()[~done], f"step {t}: state")
        if done.any():
            emulated.set_state(reference.get_state(), done)
        obs = ref[0]
    return ends


def test_cartpole_double_matches_numpy_bit_for_bit():
    rng = np.random.default_rng(0)
    n = 128
    ends = _lockstep_exact(
        CartPoleNumpy(n, seed=1), CartPoleEmulated(n, seed=2, dtype=np.float64), 600, lambda t, o: pd_policy(o, rng)
    )
    assert ends["terminated"] > 50 and ends["truncated"] > 10  # both kinds of episode end were compared


def test_pendulum_double_matches_numpy_bit_for_bit():
    rng = np.random.default_rng(0)
    n = 128
    # Torques beyond +-2 exercise the clipping; float32 like a policy's output.
    ends = _lockstep_exact(
        PendulumNumpy(n, seed=1),
        PendulumEmulated(n, seed=2, dtype=np.float64),
        450,
        lambda t, o: rng.uniform(-2.5, 2.5, (n, 1)).astype(np.float32),
    )
    assert ends["truncated"] == 2 * n and ends["terminated"] == 0


@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_float32_within_the_documented_tolerance(env):
    """Tolerances are msrl.envs.consistency's float32 defaults (atol=rtol=1e-4,
    flags may differ on <= 1e-3 of env-steps, whole state re-synced every 5
    steps): the float32 build rounds differently, and the dynamics are chaotic."""
    pair = {
        "cartpole": (CartPoleNumpy(64, seed=1), CartPoleEmulated(64, seed=2, dtype=np.float32)),
        "pendulum": (PendulumNumpy(64, seed=1), PendulumEmulated(64, seed=2, dtype=np.float32)),
    }[env]
    report = check_consistency(*pair, 600)
    assert report.ok, str(report)
    assert report.max_abs_error["obs"] < 1e-4


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("env_cls", [CartPoleEmulated, PendulumEmulated])
def test_emulated_env_passes_the_consistency_checker(env_cls, dtype):
    reference = {CartPoleEmulated: CartPoleNumpy, PendulumEmulated: PendulumNumpy}[env_cls]
    report = check_consistency(reference(32, seed=1), env_cls(32, seed=5, dtype=dtype), 300)
    assert report.ok, str(report)


def test_cartpole_autoreset_happens_on_device():
    env = CartPoleEmulated(8, seed=3, dtype=np.float64)
    state = env.get_state()
    state[:3, 2] = 0.3  # beyond 12 degrees: terminates on the next step
    env.set_state(state)
    snapshot = env.state_dict()
    snapshot["episodes"]["running_length"][5] = 499  # one step before the time limit
    env.load_state_dict(snapshot)
    obs, reward, terminated, truncated = env.step(np.zeros(8, np.int64))
    np.testing.assert_array_equal(terminated, [1, 1, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(truncated, [0, 0, 0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(reward, np.ones(8, np.float32))
    done = (terminated + truncated) > 0
    new = env.get_state()
    # The obs returned for a finished env is the first of its next episode.
    np.testing.assert_array_equal(obs[done], new[done].astype(np.float32))
    assert np.all(np.abs(new[done]) <= 0.05)
    np.testing.assert_array_equal(env.get_elapsed(), np.where(done, 0, 1))
    assert env.metrics()["episodes"] == 4


def test_pendulum_truncates_every_200_steps():
    env = PendulumEmulated(16, seed=0)
    zeros = np.zeros((16, 1), np.float32)
    for t in range(1, 401):
        _, reward, terminated, truncated = env.step(zeros)
        assert not terminated.any()
        assert truncated.all() == (t % 200 == 0) and truncated.any() == (t % 200 == 0)
        assert np.all(reward <= 0)
    m = env.metrics()
    assert m["episodes"] == 32 and m["episode_length"] == 200


def test_seeding_and_checkpoints_resume_exactly():
    a = CartPoleEmulated(16, seed=11)
    b = CartPoleEmulated(16, seed=11)
    np.testing.assert_array_equal(a.get_state(), b.get_state())
    assert not np.array_equal(a.get_state(), CartPoleEmulated(16, seed=12).get_state())
    first = a.reset(seed=4)
    np.testing.assert_array_equal(first, CartPoleEmulated(16, seed=4).observe())
    rng = np.random.default_rng(0)
    for _ in range(30):
        a.step(rng.integers(0, 2, 16))
    saved = a.state_dict()
    c = CartPoleEmulated(16, seed=99)
    c.load_state_dict(saved)
    actions = rng.integers(0, 2, (100, 16))
    for act in actions:  # autoresets included: the Philox counter was restored too
        for x, y in zip(a.step(act), c.step(act)):
            np.testing.assert_array_equal(x, y)


def test_rollout_matches_stepping_with_the_same_random_actions():
    n, steps = 256, 300
    a = CartPoleEmulated(n, seed=21, dtype=np.float64)
    b = CartPoleEmulated(n, seed=21, dtype=np.float64)
    returns = a.rollout(steps)
    kernels = b.dynamics  # the launcher, launch shape and Philox state of b's kernels
    actions = np.empty(n, np.int64)
    for _ in range(steps):
        # cartpole_step at counter c replays rollout step c with the action it drew at c.
        kernels.launch("cartpole_random_actions", [actions, n, kernels.rng.seed, kernels.rng.counter])
        b.step(actions)
    same_bits(a.get_state(), b.get_state(), "state after the rollout")
    np.testing.assert_array_equal(a.get_elapsed(), b.get_elapsed())
    m = b.metrics()
    assert returns[:, 1].sum() == m["episodes"]
    assert returns[:, 0].sum() == pytest.approx(m["episode_return"] * m["episodes"], rel=1e-12)
    # A uniformly random policy balances CartPole for ~22 steps on average.
    assert 18 < returns[:, 0].sum() / returns[:, 1].sum() < 27
    assert a.step(np.zeros(n, np.int64))[0].shape == (n, 4)  # the env goes on after a rollout


def test_registered_backends():
    import fragments  # noqa: F401  (registers the backends)
    import msrl.envs

    assert {"cuda", "cuda-emulated"} <= set(msrl.envs.backends("CartPole-v1"))
    assert {"cuda", "cuda-emulated"} <= set(msrl.envs.backends("Pendulum-v1"))
    env = msrl.envs.make("Pendulum-v1", num_envs=3, seed=0, backend="cuda-emulated", dtype=np.float64)
    assert isinstance(env, Pendulum) and env.dynamics.name == "kernels" and env.reset().shape == (3, 3)


# -- the real GPU path ------------------------------------------------------------------------


def test_require_cuda_names_what_is_missing():
    from fragments.cuda import require_cuda

    if not HAS_PYCUDA:
        with pytest.raises(ConfigError) as info:
            require_cuda()
        message = str(info.value)
        assert "pycuda" in message and "msrl[cuda]" in message and "\n" not in message
    elif not HAS_GPU:
        with pytest.raises(ConfigError, match=r"torch.cuda.is_available\(\) is False"):
            require_cuda()
    else:
        require_cuda()


@pytest.mark.skipif(HAS_PYCUDA and HAS_GPU, reason="checks the error raised where the cuda backend cannot run")
def test_cuda_backend_refuses_to_build_here():
    import fragments  # noqa: F401
    import msrl.envs

    with pytest.raises(ConfigError, match="the cuda executor needs"):
        msrl.envs.make("CartPole-v1", num_envs=4, backend="cuda")


def test_importing_fragments_does_not_import_pycuda():
    code = "import sys, fragments, fragments.cuda; assert 'pycuda' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cuda_backend_host_code_matches_numpy(cuda_backend_on_cpu):
    rng = np.random.default_rng(0)
    n = 64
    cartpole = cuda_backend_on_cpu.cuda_env(CartPole, n, seed=2, device="cpu", dtype=torch.float64)
    report = check_consistency(CartPoleNumpy(n, seed=1), cartpole, 600, actions=lambda t, o: pd_policy(o, rng))
    assert report.ok and report.max_abs_error["obs"] == 0.0, str(report)
    pendulum = cuda_backend_on_cpu.cuda_env(Pendulum, n, seed=2, device="cpu", dtype=torch.float64)
    report = check_consistency(PendulumNumpy(n, seed=1), pendulum, 450)
    assert report.ok and report.max_abs_error["obs"] == 0.0, str(report)
    obs, reward, terminated, truncated = pendulum.step(torch.zeros(n, 1))
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in (obs, reward, terminated, truncated))
    assert pendulum.metrics()["episodes"] > 0


def test_kernel_host_code_on_the_accelerators_mask_path():
    """On a GPU finished envs are handled as masks (no host sync); run that path on
    the CPU with torch tensors and emulated launches, against NumPy."""
    from msrl.envs import Kernels, TorchArrays

    loader = lambda source, defines: EmulatedTorchModule(source, defines, torch.device("cpu"))  # noqa: E731
    for env_cls in (CartPole, Pendulum):
        arrays = TorchArrays("cpu", torch.float64, columns=False, sparse=False)
        env = env_cls(64, seed=2, backend=arrays, kernels=Kernels(loader))
        report = check_consistency(env_cls(64, seed=1), env, 450)
        assert report.ok and report.max_abs_error["obs"] == 0.0, str(report)
        assert env.metrics()["episodes"] > 0


def test_cuda_backend_checkpoints_and_rollout(cuda_backend_on_cpu):
    a = cuda_backend_on_cpu.cuda_env(CartPole, 32, seed=6, device="cpu")
    actions = torch.from_numpy(np.random.default_rng(1).integers(0, 2, (80, 32)))
    for act in actions[:40]:
        a.step(act)
    saved = a.state_dict()
    b = cuda_backend_on_cpu.cuda_env(CartPole, 32, seed=0, device="cpu")
    b.load_state_dict(saved)
    for act in actions[40:]:
        for x, y in zip(a.step(act), b.step(act)):
            assert torch.equal(x, y)
    assert a.metrics() == b.metrics()
    elapsed_before = a.get_elapsed()
    returns = a.rollout(100)
    assert returns.shape == (32, 2) and returns[:, 1].sum() > 0
    assert a.metrics() == {}  # the rollout's episodes bypass metrics()
    # the running episodes go on: an env that finished none in the rollout is 100 steps older
    unfinished = returns[:, 1] == 0
    assert torch.equal(a.get_elapsed()[unfinished], elapsed_before[unfinished] + 100)
    before = a.get_elapsed()
    _, _, terminated, truncated = a.step(torch.zeros(32, dtype=torch.int64))
    assert torch.equal(a.get_elapsed(), torch.where((terminated + truncated) > 0, 0, before + 1))


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gpu_envs_match_numpy(dtype):
    from fragments.cuda import cuda_env

    for reference in (CartPoleNumpy, PendulumNumpy):
        env = cuda_env(reference, 256, seed=2, dtype=dtype)
        report = check_consistency(reference(256, seed=1), env, 600)
        assert report.ok, f"{reference.env_id}: {report}"
        assert env.get_state().is_cuda


@needs_gpu
def test_gpu_draws_the_same_numbers_as_the_emulation():
    from fragments.cuda import cuda_env

    for env_cls, emu_cls in ((CartPole, CartPoleEmulated), (Pendulum, PendulumEmulated)):
        gpu = cuda_env(env_cls, 1000, seed=5, dtype=torch.float64)
        emu = emu_cls(1000, seed=5, dtype=np.float64)
        # Same Philox words; only FMA contraction may move the last bit.
        np.testing.assert_allclose(gpu.get_state().cpu().numpy(), emu.get_state(), rtol=0, atol=1e-15)


@needs_gpu
def test_gpu_cartpole_rollout_and_metrics_stay_on_device():
    from fragments.cuda import cuda_env

    env = cuda_env(CartPole, 1 << 20, seed=0)
    returns = env.rollout(200)
    torch.cuda.synchronize()
    mean_length = float(returns[:, 0].sum() / returns[:, 1].sum())
    assert 18 < mean_length < 27
    actions = torch.zeros(env.num_envs, dtype=torch.int64, device="cuda")
    for _ in range(50):
        obs, reward, terminated, truncated = env.step(actions)
    assert obs.is_cuda and obs.dtype == torch.float32 and reward.is_cuda
    assert env.metrics()["episodes"] > 0


@needs_gpu
def test_make_builds_the_cuda_backend_on_the_gpu_by_default():
    """Outside a fragment's build, ``make(..., backend="cuda")`` needs no ``device=``."""
    import fragments  # noqa: F401
    import msrl.envs

    env = msrl.envs.make("CartPole-v1", num_envs=8, seed=0, backend="cuda")
    assert env.reset().device.type == "cuda"
