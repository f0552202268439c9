"""Which collective the learner replicas' gradients use."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from cluster import backend_for  # noqa: E402


@pytest.mark.parametrize("device, backend", [("cpu", "gloo"), ("cuda", "nccl"), ("cuda:1", "nccl")])
def test_gradients_on_cuda_use_nccl_and_on_cpu_gloo(device: str, backend: str) -> None:
    assert backend_for(device) == backend


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cpu"])
def test_replicas_that_share_a_gpu_use_gloo(device: str) -> None:
    """NCCL refuses two ranks on one GPU (multi_learner with device=cuda on a one-GPU machine)."""
    assert backend_for(device, shared=True) == "gloo"
