"""Which collective the learner replicas' gradients use."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from cluster import backend_for  # noqa: E402


@pytest.mark.parametrize("device, backend", [("cpu", "gloo"), ("cuda", "nccl"), ("cuda:1", "nccl")])
def test_gradients_on_cuda_use_nccl_and_on_cpu_gloo(device: str, backend: str) -> None:
    assert backend_for(device) == backend
