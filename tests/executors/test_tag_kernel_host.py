"""Tag's CUDA C kernels (msrl/envs/tag/tag.cu) as an environment backend: made by
name with both kernel backends registered, the limits of the kernel layout as one
config error, the cuda backend's host code (torch tensors, finished envs by row or
by mask, clamped actions) on the CPU emulation, the nvcc build, and on a GPU the
pycuda backend against NumPy (skipped where there is no GPU).  The kernels against
NumPy bit for bit are in ``test_tag_kernel.py``.

Every build goes to a temporary MSRL_CACHE_DIR (one per configuration).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from kernel_support import CROWDED, EmulatedTorchModule, needs_gpu, needs_nvcc, same_outputs

import fragments.cuda
from fragments.cuda import emulated_env, load_source
from msrl.core import ConfigError
from msrl.envs import MAX_KERNEL_AGENTS, Kernels, MultiAgentKernelDynamics, NumpyArrays, TorchArrays
from msrl.envs.consistency import check_consistency
from msrl.envs.tag import Tag

tag_emulated = functools.partial(emulated_env, Tag)  # the cuda-emulated backend


pytestmark = pytest.mark.usefixtures("kernel_cache")


# -- registration, layout limits, the host code of the cuda backend ---------------------------------


def test_made_by_name_with_both_kernel_backends_registered():
    import msrl.envs

    assert {"cuda", "cuda-emulated", "numpy"} <= set(msrl.envs.backends("Tag-v0"))
    env = msrl.envs.make(
        "Tag-v0", num_envs=3, seed=0, backend="cuda-emulated", dtype=np.float64, **CROWDED, num_observed=3
    )
    assert isinstance(env, Tag) and isinstance(env.dynamics, MultiAgentKernelDynamics)
    assert env.dynamics.grid == (3, 1, 1) and env.dynamics.block == (7, 1, 1)  # no thread without an agent
    obs = env.reset()
    assert obs["taggers"].shape == (3, 3, 22) and obs["runners"].shape == (3, 4, 22)
    assert "kernels" in repr(env)


def test_too_many_agents_for_the_kernel_layout_is_one_config_error():
    import msrl.envs

    with pytest.raises(ConfigError) as info:
        msrl.envs.make(
            "Tag-v0", num_envs=1, backend="cuda-emulated", num_taggers=1, num_runners=MAX_KERNEL_AGENTS, num_observed=3
        )
    message = str(info.value)
    assert "\n" not in message and str(MAX_KERNEL_AGENTS) in message and str(MAX_KERNEL_AGENTS + 1) in message


def test_the_largest_supported_size_passes_the_layout_check():
    """2^23 agents: the layout is accepted and the first launch (the reset) is one block of
    256 threads for the one environment.  The launcher stops there: 8M agents are beyond
    what the emulation steps in a test."""
    launches = []

    class Stop(Exception):
        pass

    class Recorder:
        def launch(self, kernel, grid, block, args):
            launches.append((kernel, grid, block))
            raise Stop

    with pytest.raises(Stop):
        Tag(
            1,
            num_taggers=1,
            num_runners=MAX_KERNEL_AGENTS - 1,
            num_observed=3,
            backend=NumpyArrays(np.float64),
            kernels=Kernels(lambda source, defines: Recorder()),
        )
    assert launches == [("tag_reset", (1, 1, 1), (256, 1, 1))]


@pytest.mark.parametrize("sparse", [True, False], ids=["rows", "masks"])
def test_cuda_backend_host_code_matches_numpy(monkeypatch, sparse):
    """What the cuda backend runs on a GPU (torch tensors, per-group dicts of them, finished envs by
    row or, as on an accelerator, by mask) with emulated launches instead of pycuda."""
    kw = dict(CROWDED, num_observed=3)
    if sparse:
        monkeypatch.setattr(fragments.cuda, "require_cuda", lambda: None)
        monkeypatch.setattr(fragments.cuda, "cuda_module", EmulatedTorchModule)
        env = fragments.cuda.cuda_env(Tag, 8, seed=2, device="cpu", dtype=torch.float64, **kw)
    else:
        arrays = TorchArrays("cpu", torch.float64, columns=False, sparse=False)
        loader = lambda source, defines: EmulatedTorchModule(source, defines, torch.device("cpu"))  # noqa: E731
        env = Tag(8, seed=2, backend=arrays, kernels=Kernels(loader), **kw)
    report = check_consistency(Tag(8, seed=1, **kw), env, 90)
    assert report.ok and report.max_abs_error["obs"] == 0.0 and report.max_abs_error["reward"] == 0.0, str(report)
    obs, rewards, terminated, truncated = env.step(
        {"taggers": torch.zeros(8, 3, dtype=torch.int64), "runners": torch.zeros(8, 4, dtype=torch.int64)}
    )
    outputs = (*obs.values(), *rewards.values(), terminated, truncated)
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in outputs)
    assert env.metrics()["episodes"] > 0
    active = env.active()  # read off the kernels' state: what every agent sees of itself
    for name in ("taggers", "runners"):
        assert isinstance(active[name], torch.Tensor) and torch.equal(active[name], obs[name][:, :, 5])
    assert active["runners"].min() == 0.0  # CROWDED: some runner was tagged in these 91 steps


def test_unvalidated_out_of_range_actions_are_clamped(monkeypatch):
    """Without validation nothing checks action values on the device; the kernel clamps
    them into range, as the torch backend does, rather than extrapolating the levels."""
    monkeypatch.setattr(fragments.cuda, "require_cuda", lambda: None)
    monkeypatch.setattr(fragments.cuda, "cuda_module", EmulatedTorchModule)
    kw = dict(CROWDED, device="cpu", dtype=torch.float64, validate=False)
    wild, tame = (fragments.cuda.cuda_env(Tag, 4, seed=3, **kw) for _ in range(2))
    rng = np.random.default_rng(5)
    for _ in range(10):
        action = {name: torch.from_numpy(rng.integers(-20, 35, (4, g.num_agents))) for name, g in wild.groups.items()}
        same_outputs(wild.step(action), tame.step({k: v.clamp(0, 14) for k, v in action.items()}))
    assert torch.equal(wild.get_state(), tame.get_state())


# -- nvcc and the GPU -------------------------------------------------------------------------------


@needs_nvcc
@pytest.mark.parametrize("real, observed", [("float", 3), ("double", 0)], ids=["float-3-nearest", "double-all"])
def test_tag_compiles_to_ptx_for_sm90(real, observed):
    defines = {"MSRL_REAL": real, **Tag(1, num_observed=observed).kernel_defines()}
    ptx = fragments.cuda.compile_ptx("tag", arch="sm_90", defines=defines).decode()
    for kernel in load_source("tag").kernels:
        assert f".entry {kernel}(" in ptx, f"{kernel} missing from the PTX of tag.cu"
    assert "bar.sync" in ptx or "barrier.sync" in ptx  # tag_step's phases are real barriers
    assert ("div.rn.f64" in ptx) == (real == "double")


@needs_gpu
def test_gpu_tag_matches_numpy():
    kw = dict(num_taggers=30, num_runners=270, world_size=20.0, num_observed=3, max_episode_steps=40)
    env = fragments.cuda.cuda_env(Tag, 64, seed=2, dtype=torch.float64, threads_per_block=128, **kw)
    report = check_consistency(Tag(64, seed=1, **kw), env, 100)
    assert report.ok, str(report)
    assert env.get_state().is_cuda


@needs_gpu
def test_gpu_tag_in_float32_matches_numpy_within_float_tolerance():
    """float32 against NumPy's float64, resynced every step, with no choice of the nearest agents:
    among 270 runners, two distances within float32's rounding of each other are common, and the
    two backends then observe different neighbours (seen on an H200: an observation off by 1 at
    step 5). What is left to decide (edges, tags) has margins far wider than the rounding here."""
    kw = dict(num_taggers=3, num_runners=12, world_size=20.0, num_observed=0, max_episode_steps=40)
    env = fragments.cuda.cuda_env(Tag, 64, seed=2, dtype=torch.float32, threads_per_block=128, **kw)
    report = check_consistency(Tag(64, seed=1, **kw), env, 100, resync_every=1)
    assert report.ok, str(report)


@needs_gpu
def test_gpu_draws_the_same_reset_states_as_the_emulation():
    kw = dict(num_taggers=30, num_runners=270, num_observed=3)
    gpu = fragments.cuda.cuda_env(Tag, 64, seed=5, dtype=torch.float64, **kw)
    emulated = tag_emulated(64, seed=5, dtype=np.float64, threads_per_block=128, **kw)
    # The same Philox words, whatever the block size; only FMA contraction may move the last bit.
    np.testing.assert_allclose(gpu.get_state().cpu().numpy(), emulated.get_state(), rtol=0, atol=1e-12)
