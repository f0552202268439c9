"""The CUDA C kernels (environments' and fragments' own): they build as real CUDA (nvcc), and
the very same source, run on the CPU through the emulation of the CUDA
execution model, builds once per configuration, draws correct random numbers
(Philox, categorical and Gaussian sampling), checks its launches, and needs its
barriers.  The environments built on these kernels are in ``test_cuda_envs.py``.
The GPU test at the end runs the pycuda build and is skipped on machines without
pycuda or a GPU.

Every build goes to a temporary MSRL_CACHE_DIR, once per configuration.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from kernel_support import DOUBLE, FLOAT, needs_gpu, needs_nvcc

import fragments.cuda
from fragments.cuda import EmulatedModule, emulated_env, emulated_module, load_source
from msrl.core import ConfigError
from msrl.envs.cartpole import CartPole
from msrl.envs.pendulum import Pendulum

cartpole_emulated, pendulum_emulated = (functools.partial(emulated_env, cls) for cls in (CartPole, Pendulum))

pytestmark = pytest.mark.usefixtures("kernel_cache")

SOURCES = ["cartpole", "pendulum", "sampling", "reduce"]


# -- nvcc ------------------------------------------------------------------------


@needs_nvcc
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


@needs_nvcc
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
    for cls in (cartpole_emulated, pendulum_emulated):
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
    """40 actions x 128 threads do not fit the shared tile, so the kernel reads
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
