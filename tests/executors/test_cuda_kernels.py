"""The CUDA C kernels of fragments/kernels/: they build as real CUDA (nvcc), and
the very same source, run on the CPU through the emulation of the CUDA
execution model, matches the NumPy backends (bit for bit in double), draws
correct random numbers, and needs its barriers.  The GPU tests at the end run
the pycuda backends and are skipped on machines without pycuda or a GPU.

Every build goes to a temporary MSRL_CACHE_DIR, once per configuration.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import fragments.cuda
from fragments.cuda import EmulatedModule, cartpole_emulated, emulated_module, load_source, pendulum_emulated
from msrl.core import ConfigError
from msrl.envs.cartpole import CartPole
from msrl.envs.consistency import check_consistency
from msrl.envs.pendulum import Pendulum

CartPoleNumpy, PendulumNumpy = CartPole, Pendulum
CartPoleEmulated, PendulumEmulated = cartpole_emulated, pendulum_emulated

SOURCES = ["cartpole", "pendulum", "sampling", "reduce"]
DOUBLE = {"MSRL_REAL": "double"}
FLOAT = {"MSRL_REAL": "float"}

HAS_NVCC = fragments.cuda.find_nvcc() is not None
HAS_PYCUDA = importlib.util.find_spec("pycuda") is not None
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(
    not (HAS_PYCUDA and HAS_GPU and HAS_NVCC),
    reason="GPU tests need pycuda, an NVIDIA GPU visible to torch and nvcc "
    f"(pycuda={'yes' if HAS_PYCUDA else 'no'}, gpu={'yes' if HAS_GPU else 'no'}, nvcc={'yes' if HAS_NVCC else 'no'})",
)


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(tmp_path_factory):
    """All builds of this module go to a fresh cache directory."""
    previous = os.environ.get("MSRL_CACHE_DIR")
    path = tmp_path_factory.mktemp("msrl-cache")
    os.environ["MSRL_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("MSRL_CACHE_DIR", None)
    else:
        os.environ["MSRL_CACHE_DIR"] = previous


def pd_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A balancing controller whose actions are flipped with a probability
    from 0 (first env) to 0.4 (last env): the first envs reach the 500-step
    time limit, the last ones terminate often."""
    x, x_dot, theta, theta_dot = obs.T
    action = (10 * theta + 2 * theta_dot + 0.1 * x + 0.2 * x_dot > 0).astype(np.int64)
    flip = rng.random(action.shape) < np.linspace(0.0, 0.4, action.shape[0])
    return np.where(flip, 1 - action, action)


# -- nvcc ------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc (CUDA toolkit) not found on PATH, $CUDA_HOME or /usr/local/cuda*")
@pytest.mark.parametrize("defines", [FLOAT, DOUBLE], ids=["float", "double"])
@pytest.mark.parametrize("source", SOURCES)
def test_every_kernel_source_compiles_to_ptx_for_sm90(source, defines):
    ptx = fragments.cuda.compile_ptx(source, arch="sm_90", defines=defines).decode()
    for kernel in load_source(source).kernels:
        assert f".entry {kernel}(" in ptx, f"{kernel} missing from the PTX of {source}.cu"
    # __syncthreads() is a real barrier on the GPU (bar.sync / barrier.sync).
    assert ("bar.sync" in ptx or "barrier.sync" in ptx) == (source in ("sampling", "reduce"))
    if source == "cartpole":  # MSRL_REAL picks the precision of the physics (its divisions)
        assert ("div.rn.f64" in ptx) == (defines is DOUBLE)


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc (CUDA toolkit) not found on PATH, $CUDA_HOME or /usr/local/cuda*")
def test_nvcc_builds_are_cached(kernel_cache):
    first = fragments.cuda.compile_to_cache("reduce", "cubin", "sm_90", FLOAT)
    mtime = first.stat().st_mtime_ns
    again = fragments.cuda.compile_to_cache("reduce", "cubin", "sm_90", FLOAT)
    assert again == first and again.stat().st_mtime_ns == mtime
    assert first.parent == kernel_cache / "kernels"
    assert not list(first.parent.glob("*.tmp"))


# -- the emulation itself ------------------------------------------------------------


def test_emulation_builds_once_per_configuration(kernel_cache):
    a = EmulatedModule("reduce", DOUBLE)
    b = EmulatedModule("reduce", DOUBLE)
    c = EmulatedModule("reduce", FLOAT)
    assert a.path == b.path != c.path
    assert a.path.parent == kernel_cache / "kernels" and a.path.exists()
    assert not list(a.path.parent.glob("*.tmp"))


def test_missing_compiler_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(ConfigError, match="needs a C\\+\\+ compiler") as info:
        EmulatedModule("reduce", {**DOUBLE, "MSRL_TEST_UNCACHED": 1})
    assert "\n" not in str(info.value)


def test_barrier_scan_finds_the_kernels_that_sync():
    assert load_source("reduce").kernels["block_sum"].uses_barrier
    assert load_source("sampling").kernels["sample_categorical"].uses_barrier
    assert not load_source("sampling").kernels["sample_gaussian"].uses_barrier
    assert not any(k.uses_barrier for k in load_source("cartpole").kernels.values())


def test_philox_matches_random123_known_answers():
    module = emulated_module("cartpole", DOUBLE)
    out = np.zeros((1, 4), np.uint32)
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for ctr, key, expected in cases:
        module.launch("msrl_philox_raw", 1, 1, [out, 1, *ctr, *key])
        assert tuple(int(v) for v in out[0]) == expected


def test_float_and_double_builds_draw_the_same_numbers():
    """Uniforms use the same Philox words in both precisions (23 vs 52 bits)."""
    for cls in (CartPoleEmulated, PendulumEmulated):
        single = cls(500, seed=8, dtype=np.float32).get_state()
        double = cls(500, seed=8, dtype=np.float64).get_state()
        np.testing.assert_allclose(single, double, rtol=0, atol=1e-6)


def test_launch_checks_arguments():
    module = emulated_module("cartpole", DOUBLE)
    n = 4
    state, obs = np.zeros((n, 4)), np.zeros((n, 4), np.float32)
    with pytest.raises(TypeError, match="dtype float64"):
        module.launch("cartpole_reset", 1, 32, [state.astype(np.float32), n, 0, 0])
    with pytest.raises(TypeError, match="takes 4 arguments"):
        module.launch("cartpole_reset", 1, 32, [state, n, 0])
    with pytest.raises(OverflowError):
        module.launch("cartpole_reset", 1, 32, [state, n, -1, 0])
    with pytest.raises(RuntimeError, match="invalid launch configuration"):
        module.launch("cartpole_reset", 1, 2048, [state, n, 0, 0])
    with pytest.raises(TypeError, match="dtype int64"):  # elapsed is the tracker's int64 running length
        module.launch(
            "cartpole_step",
            1,
            32,
            [
                state,
                np.zeros(n, np.int32),
                np.zeros(n, np.int64),
                obs,
                *(np.zeros(n, np.float32) for _ in range(3)),
                n,
                0,
                0,
            ],
        )


# -- barriers and shared memory -------------------------------------------------------


@pytest.mark.parametrize("threads", [64, 128])
def test_block_reduction_needs_and_gets_a_working_barrier(threads):
    """Each block's tree reduction reads partial sums other threads wrote after
    a __syncthreads(); integer-valued doubles make the expected sums exact."""
    module = emulated_module("reduce", DOUBLE)
    rng = np.random.default_rng(threads)
    blocks = 3
    n = blocks * threads - 5  # a partial last block
    values = rng.integers(-1000, 1000, n).astype(np.float64)
    mask = (rng.random(n) < 0.7).astype(np.float32)
    out = np.zeros((blocks, 2))
    module.launch("block_sum", blocks, threads, [values, mask, n, out])
    for b in range(blocks):
        sl = slice(b * threads, min(n, (b + 1) * threads))
        assert out[b, 0] == values[sl][mask[sl] > 0].sum()
        assert out[b, 1] == np.count_nonzero(mask[sl])
    module.launch("block_sum", blocks, threads, [values, None, n, out])  # mask=NULL: everything counts
    assert out[:, 0].sum() == values.sum() and out[:, 1].sum() == n


def test_reduction_is_wrong_without_the_barrier():
    """The same kernel with a no-op __syncthreads (a broken emulation) and threads
    run one after another: thread 0 reads partial sums nobody has written yet
    (shared memory starts as NaN), so the test above would catch it."""
    broken = EmulatedModule("reduce", {**DOUBLE, "MSRL_EMU_NO_BARRIER": None})
    values = np.arange(64, dtype=np.float64)
    out = np.zeros((1, 2))
    broken.launch("block_sum", 1, 64, [values, None, 64, out], mode="serial")
    assert not out[0, 0] == values.sum()
    # With real threads the missing barrier is a race; it loses (observed: every time).
    results = []
    for _ in range(3):
        broken.launch("block_sum", 1, 64, [values, None, 64, out], mode="team")
        results.append(out[0, 0] == values.sum())
    assert not all(results)


def test_barrier_in_a_serial_launch_is_an_error():
    module = emulated_module("reduce", DOUBLE)
    values, out = np.ones(64), np.zeros((1, 2))
    with pytest.raises(RuntimeError, match="__syncthreads"):
        module.launch("block_sum", 1, 64, [values, None, 64, out], mode="serial")


# -- environments: emulation vs NumPy -------------------------------------------------------


def _assert_same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, what
    bits = np.uint64 if a.itemsize == 8 else np.uint32
    assert np.array_equal(np.ascontiguousarray(a).view(bits), np.ascontiguousarray(b).view(bits)), (
        f"{what}: {np.count_nonzero(a != b)} values differ, max abs diff {np.max(np.abs(a - b))}"
    )


def _lockstep_exact(reference, emulated, steps, act):
    """Step both from the same float64 state with the same actions; everything
    must be bit-identical, including the float64 state.  Envs whose episode
    ended are re-synced (each backend draws its reset states from its own RNG)."""
    reference.set_state(reference.get_state())
    emulated.set_state(reference.get_state())
    obs = reference.observe()
    _assert_same_bits(obs, emulated.observe(), "initial obs")
    ends = {"terminated": 0, "truncated": 0}
    for t in range(steps):
        action = act(t, obs)
        ref = reference.step(action.copy())
        emu = emulated.step(action.copy())
        for name, i in (("reward", 1), ("terminated", 2), ("truncated", 3)):
            _assert_same_bits(ref[i], emu[i], f"step {t}: {name}")
        done = (ref[2] + ref[3]) > 0
        ends["terminated"] += int(ref[2].sum())
        ends["truncated"] += int(ref[3].sum())
        _assert_same_bits(ref[0][~done], emu[0][~done], f"step {t}: obs")
        _assert_same_bits(reference.get_state()[~done], emulated.get_state()[~done], f"step {t}: state")
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
    _assert_same_bits(a.get_state(), b.get_state(), "state after the rollout")
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


# -- sampling -----------------------------------------------------------------------------


def _categorical(module, logits, seed, counter, threads=128, grid=None):
    n, num_actions = logits.shape
    actions, logp = np.empty(n, np.int64), np.empty(n, logits.dtype)
    grid = grid or min(-(-n // threads), 4)  # a grid-stride loop covers the rest
    module.launch("sample_categorical", grid, threads, [logits, n, num_actions, seed, counter, actions, logp])
    return actions, logp


def test_categorical_frequencies_follow_softmax():
    module = emulated_module("sampling", DOUBLE)
    probs_logits = np.array([0.5, -1.0, 2.0, 0.0, 1.0])
    n = 200_000
    actions, logp = _categorical(module, np.tile(probs_logits, (n, 1)), seed=7, counter=0)
    expected = np.exp(probs_logits - probs_logits.max())
    expected /= expected.sum()
    counts = np.bincount(actions, minlength=5)
    chi2 = float(((counts - n * expected) ** 2 / (n * expected)).sum())
    assert chi2 < 25.0  # 4 degrees of freedom: P(chi2 > 25) ~ 5e-5 for a correct sampler
    log_softmax = probs_logits - math.log(np.exp(probs_logits).sum())
    np.testing.assert_allclose(logp, log_softmax[actions], rtol=0, atol=1e-12)


@pytest.mark.parametrize("defines", [DOUBLE, FLOAT], ids=["double", "float"])
def test_categorical_logp_and_determinism(defines):
    module = emulated_module("sampling", defines)
    dtype = np.float64 if defines is DOUBLE else np.float32
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 2, (1000, 6)).astype(dtype)
    actions, logp = _categorical(module, logits, seed=3, counter=5)
    again, logp_again = _categorical(module, logits, seed=3, counter=5, threads=64, grid=2)
    np.testing.assert_array_equal(actions, again)  # a function of (seed, counter, row) only
    np.testing.assert_array_equal(logp, logp_again)
    assert not np.array_equal(actions, _categorical(module, logits, seed=3, counter=6)[0])
    assert not np.array_equal(actions, _categorical(module, logits, seed=4, counter=5)[0])
    ref = torch.log_softmax(torch.from_numpy(logits.astype(np.float64)), dim=1).numpy()
    np.testing.assert_allclose(logp, ref[np.arange(1000), actions], atol=1e-12 if dtype == np.float64 else 2e-6)


def test_categorical_staged_and_direct_paths_agree():
    """40 actions x 128 threads no longer fit the shared tile, so the kernel reads
    global memory directly; with 32 threads it stages the tile.  Same draws."""
    module = emulated_module("sampling", DOUBLE)
    logits = np.random.default_rng(2).normal(size=(300, 40))
    staged = _categorical(module, logits, seed=9, counter=1, threads=32)
    direct = _categorical(module, logits, seed=9, counter=1, threads=128)
    np.testing.assert_array_equal(staged[0], direct[0])
    np.testing.assert_array_equal(staged[1], direct[1])


def test_gaussian_moments_and_logp():
    module = emulated_module("sampling", DOUBLE)
    n, dim = 100_000, 3  # odd dim: the last Box-Muller pair is half used
    rng = np.random.default_rng(3)
    mean = rng.normal(size=(n, dim))
    log_std = np.array([-1.0, 0.0, 0.7])
    actions, logp = np.empty((n, dim)), np.empty(n)
    args = [mean, log_std, n, dim, 11, 0, actions, logp]
    module.launch("sample_gaussian", -(-n // 256), 256, args)
    z = (actions - mean) / np.exp(log_std)
    assert np.all(np.abs(z.mean(axis=0)) < 0.02)  # 5 standard errors
    assert np.all(np.abs(z.std(axis=0) - 1) < 0.015)
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 0.02  # the two halves of a pair are independent
    ref = torch.distributions.Normal(torch.from_numpy(mean), torch.from_numpy(np.exp(log_std))).log_prob(
        torch.from_numpy(actions)
    )
    np.testing.assert_allclose(logp, ref.sum(dim=1).numpy(), rtol=1e-9, atol=1e-9)
    first = actions.copy()
    module.launch("sample_gaussian", 7, 64, args)  # another launch shape: same draws
    np.testing.assert_array_equal(actions, first)


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


class _EmulatedTorchModule:
    """Stands in for CudaModule: torch CPU tensors, shared with NumPy views
    (zero copy), launched on the emulation."""

    def __init__(self, source_name, defines, device):
        assert device.type == "cpu"
        self.module = emulated_module(source_name, defines)

    def launch(self, kernel, grid, block, args):
        self.module.launch(kernel, grid, block, [a.numpy() if isinstance(a, torch.Tensor) else a for a in args])


@pytest.fixture
def cuda_backend_on_cpu(monkeypatch):
    """The CUDA backends' host code (torch tensors, TorchEpisodeTracker,
    set_state, checkpoints) with emulated launches instead of pycuda."""
    import fragments.cuda

    monkeypatch.setattr(fragments.cuda, "require_cuda", lambda: None)
    monkeypatch.setattr(fragments.cuda, "cuda_module", _EmulatedTorchModule)
    return fragments.cuda


def test_cuda_backend_host_code_matches_numpy(cuda_backend_on_cpu):
    rng = np.random.default_rng(0)
    n = 64
    cartpole = cuda_backend_on_cpu.cartpole_cuda(n, seed=2, device="cpu", dtype=torch.float64)
    report = check_consistency(CartPoleNumpy(n, seed=1), cartpole, 600, actions=lambda t, o: pd_policy(o, rng))
    assert report.ok and report.max_abs_error["obs"] == 0.0, str(report)
    pendulum = cuda_backend_on_cpu.pendulum_cuda(n, seed=2, device="cpu", dtype=torch.float64)
    report = check_consistency(PendulumNumpy(n, seed=1), pendulum, 450)
    assert report.ok and report.max_abs_error["obs"] == 0.0, str(report)
    obs, reward, terminated, truncated = pendulum.step(torch.zeros(n, 1))
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in (obs, reward, terminated, truncated))
    assert pendulum.metrics()["episodes"] > 0


def test_kernel_host_code_on_the_accelerators_mask_path():
    """On a GPU finished envs are handled as masks (no host sync); run that path on
    the CPU with torch tensors and emulated launches, against NumPy."""
    from msrl.envs import Kernels, TorchArrays

    loader = lambda source, defines: _EmulatedTorchModule(source, defines, torch.device("cpu"))  # noqa: E731
    for env_cls in (CartPole, Pendulum):
        arrays = TorchArrays("cpu", torch.float64, columns=False, sparse=False)
        env = env_cls(64, seed=2, backend=arrays, kernels=Kernels(loader))
        report = check_consistency(env_cls(64, seed=1), env, 450)
        assert report.ok and report.max_abs_error["obs"] == 0.0, str(report)
        assert env.metrics()["episodes"] > 0


def test_cuda_backend_checkpoints_and_rollout(cuda_backend_on_cpu):
    a = cuda_backend_on_cpu.cartpole_cuda(32, seed=6, device="cpu")
    actions = torch.from_numpy(np.random.default_rng(1).integers(0, 2, (80, 32)))
    for act in actions[:40]:
        a.step(act)
    saved = a.state_dict()
    b = cuda_backend_on_cpu.cartpole_cuda(32, seed=0, device="cpu")
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
    from fragments.cuda import cartpole_cuda, pendulum_cuda

    for reference, cuda_env in ((CartPoleNumpy, cartpole_cuda), (PendulumNumpy, pendulum_cuda)):
        env = cuda_env(256, seed=2, dtype=dtype)
        report = check_consistency(reference(256, seed=1), env, 600)
        assert report.ok, f"{cuda_env.__name__}: {report}"
        assert env.get_state().is_cuda


@needs_gpu
def test_gpu_draws_the_same_numbers_as_the_emulation():
    from fragments.cuda import cartpole_cuda, pendulum_cuda

    for cuda_cls, emu_cls in ((cartpole_cuda, CartPoleEmulated), (pendulum_cuda, PendulumEmulated)):
        gpu = cuda_cls(1000, seed=5, dtype=torch.float64)
        emu = emu_cls(1000, seed=5, dtype=np.float64)
        # Same Philox words; only FMA contraction may move the last bit.
        np.testing.assert_allclose(gpu.get_state().cpu().numpy(), emu.get_state(), rtol=0, atol=1e-15)


@needs_gpu
def test_gpu_cartpole_rollout_and_metrics_stay_on_device():
    from fragments.cuda import cartpole_cuda

    env = cartpole_cuda(1 << 20, seed=0)
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
def test_gpu_sampling_and_barriers_match_the_emulation():
    from fragments.cuda import cuda_module

    device = torch.device("cuda", torch.cuda.current_device())
    sampling = cuda_module("sampling", DOUBLE, device)
    logits = torch.randn(10_000, 6, dtype=torch.float64, device=device)
    actions = torch.empty(10_000, dtype=torch.int64, device=device)
    logp = torch.empty(10_000, dtype=torch.float64, device=device)
    sampling.launch("sample_categorical", 79, 128, [logits, 10_000, 6, 3, 1, actions, logp])
    emu_actions, emu_logp = _categorical(emulated_module("sampling", DOUBLE), logits.cpu().numpy(), 3, 1)
    assert (actions.cpu().numpy() == emu_actions).mean() > 0.999
    reduce = cuda_module("reduce", DOUBLE, device)
    values = torch.arange(1024, dtype=torch.float64, device=device)
    out = torch.zeros((8, 2), dtype=torch.float64, device=device)
    reduce.launch("block_sum", 8, 128, [values, None, 1024, out])
    assert out[:, 0].sum().item() == 1023 * 1024 / 2 and out[:, 1].sum().item() == 1024
