"""The one fixture every executor case runs through: ``executor`` is each kind in the registry
(``fragments.executors.EXECUTORS``), skipped with the reason where this machine cannot run it
(the cuda executor without pycuda or a GPU; its kernels are checked through the CPU emulation in
``test_cuda_kernels*.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from fragments.executors import EXECUTORS, get_executor
from msrl.core import ConfigError
from policies import load_policy


@pytest.fixture(params=sorted(EXECUTORS))
def executor(request: pytest.FixtureRequest) -> Iterator[str]:
    """An executor kind that runs here.  Its ``setup`` sets torch's thread count for the whole
    process: the count is put back afterwards, so no other test sees it."""
    kind = request.param
    spec = load_policy({"preset": "local", "executor": kind}).fragments[0]
    try:
        get_executor(kind).check_available(spec)
    except ConfigError as exc:
        pytest.skip(f"the {kind} executor cannot run on this machine: {exc}")
    threads = torch.get_num_threads()
    try:
        yield kind
    finally:
        torch.set_num_threads(threads)
