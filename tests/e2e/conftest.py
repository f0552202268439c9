"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/NAME.py as a module (its ``main`` is what ``python benchmarks/NAME.py`` runs)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"{name}_script", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/learning.py as a module."""
    return load_benchmark("learning", monkeypatch)


@pytest.fixture
def marl(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/marl.py as a module."""
    return load_benchmark("marl", monkeypatch)
