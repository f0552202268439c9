"""What the CUDA-kernel test modules share (``test_cuda_kernels``, ``test_cuda_envs``,
``test_tag_kernel``, ``test_tag_kernel_host``): what this machine has (nvcc, pycuda, a GPU)
and the markers that skip on it, bit-exact comparison, and a stand-in for pycuda's module
that runs the kernels' host code on the CPU emulation."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch

import fragments.cuda

HAS_NVCC = fragments.cuda.find_nvcc() is not None
HAS_PYCUDA = importlib.util.find_spec("pycuda") is not None
HAS_GPU = torch.cuda.is_available()
needs_nvcc = pytest.mark.skipif(
    not HAS_NVCC, reason="nvcc (CUDA toolkit) not found on PATH, $CUDA_HOME or /usr/local/cuda*"
)
needs_gpu = pytest.mark.skipif(
    not (HAS_PYCUDA and HAS_GPU and HAS_NVCC),
    reason="GPU tests need pycuda, an NVIDIA GPU visible to torch and nvcc "
    f"(pycuda={'yes' if HAS_PYCUDA else 'no'}, gpu={'yes' if HAS_GPU else 'no'}, nvcc={'yes' if HAS_NVCC else 'no'})",
)

DOUBLE = {"MSRL_REAL": "double"}
FLOAT = {"MSRL_REAL": "float"}

# A small, crowded Tag world: edge hits, tags and (with runners exiting) terminations are frequent,
# and a 30-step limit gives truncations and end-of-game rewards within a short run.
CROWDED: dict[str, Any] = dict(num_taggers=3, num_runners=4, world_size=4.0, tagging_distance=1.2, max_episode_steps=30)


def same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """``a`` and ``b`` are equal bit for bit (same dtype and shape; NaNs and signed zeros too)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    bits = np.uint64 if a.itemsize == 8 else np.uint32
    assert np.array_equal(a.view(bits), b.view(bits)), (
        f"{what}: {np.count_nonzero(a != b)} values differ, max abs diff {np.max(np.abs(a - b))}"
    )


def same_outputs(a: tuple, b: tuple) -> None:
    """Two multi-agent ``step`` results (per-group dicts of obs and rewards, per-env flags; NumPy
    arrays or tensors) are equal bit for bit."""
    host = lambda v: v.numpy() if isinstance(v, torch.Tensor) else v  # noqa: E731
    for x, y in zip(a, b):
        if isinstance(x, dict):
            assert set(x) == set(y)
            for group in x:
                same_bits(host(x[group]), host(y[group]), group)
        else:
            same_bits(host(x), host(y), "flags")


class EmulatedTorchModule:
    """Stands in for CudaModule: torch CPU tensors, shared with NumPy views (zero copy),
    launched on the emulation."""

    def __init__(self, source_name: str, defines: dict, device: torch.device) -> None:
        assert device.type == "cpu"
        self.module = fragments.cuda.emulated_module(source_name, defines)

    def launch(self, kernel: str, grid: Any, block: Any, args: list) -> None:
        self.module.launch(kernel, grid, block, [a.numpy() if isinstance(a, torch.Tensor) else a for a in args])
