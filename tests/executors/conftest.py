"""The one fixture every executor case runs through: ``executor`` is each kind in the registry
(``fragments.executors.EXECUTORS``), skipped with the reason where this machine cannot run it
(the cuda executor without pycuda or a GPU; its kernels are checked through the CPU emulation in
``test_cuda_*.py`` and ``test_tag_kernel*.py``, which use the two kernel fixtures below)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from kernel_support import EmulatedTorchModule

import fragments.cuda
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


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """All kernel builds of the module that uses it go to a fresh cache directory."""
    previous = os.environ.get("MSRL_CACHE_DIR")
    path = tmp_path_factory.mktemp("msrl-cache")
    os.environ["MSRL_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("MSRL_CACHE_DIR", None)
    else:
        os.environ["MSRL_CACHE_DIR"] = previous


@pytest.fixture
def cuda_backend_on_cpu(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``fragments.cuda`` with its CUDA backends' host code (torch tensors, episode tracking,
    set_state, checkpoints) launching on the emulation instead of pycuda."""
    monkeypatch.setattr(fragments.cuda, "require_cuda", lambda: None)
    monkeypatch.setattr(fragments.cuda, "cuda_module", EmulatedTorchModule)
    return fragments.cuda
