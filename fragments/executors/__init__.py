"""Executors, chosen from one table by the fragment's ``executor`` kind.

``EXECUTORS`` is the registry: adding an executor touches that table and nothing else.
``check_executor`` is the one check of a kind against it, which the partitioner, the
driver's pre-flight (``check_fragment``) and ``get_executor`` all call, so every unknown
kind fails with the same one-line ``ConfigError`` naming the valid choices.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fragments.executors._base import Executor, FragmentExecutionError, Transport, threads_for
from fragments.executors.cpu import CpuExecutor, CpuKernelExecutor
from fragments.executors.cuda import CudaExecutor
from fragments.executors.torch import TorchExecutor
from msrl.core import ConfigError
from policies import FragmentSpec

EXECUTORS: Mapping[str, type[Executor]] = MappingProxyType(
    {cls.kind: cls for cls in (CpuExecutor, CpuKernelExecutor, TorchExecutor, CudaExecutor)}
)
"""Every executor kind a fragment may name, and the class that runs it (read-only).  Importing
them is cheap: the cuda executor loads pycuda only when it checks the machine."""


def check_executor(kind: str, fragment: str | None = None) -> None:
    """Raise a one-line ``ConfigError`` if ``kind`` is no executor in ``EXECUTORS``, naming the
    valid choices (and the fragment that asked, where there is one)."""
    if kind not in EXECUTORS:
        where = "" if fragment is None else f"fragment {fragment!r}: "
        raise ConfigError(f"{where}unknown executor {kind!r}; valid choices: {', '.join(sorted(EXECUTORS))}")


def get_executor(kind: str) -> type[Executor]:
    """The executor class for ``kind`` (``check_executor``'s error for an unknown one)."""
    check_executor(kind)
    return EXECUTORS[kind]


def check_fragment(spec: FragmentSpec, on_this_machine: bool) -> None:
    """Raise a one-line ``ConfigError`` if fragment ``spec`` cannot run: an unknown executor, a
    device that is no torch device or not one its executor runs on (``Executor.check_spec``,
    true on every machine), and with ``on_this_machine`` what this machine lacks for it (a GPU,
    pycuda: ``Executor.check_available``)."""
    check_executor(spec.executor, spec.name)
    executor = EXECUTORS[spec.executor]
    if on_this_machine:
        executor.check_available(spec)
    else:
        executor.check_spec(spec)


__all__ = [
    "EXECUTORS",
    "Executor",
    "FragmentExecutionError",
    "Transport",
    "check_executor",
    "check_fragment",
    "get_executor",
    "threads_for",
]
