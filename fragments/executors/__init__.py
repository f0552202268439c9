"""Executors, chosen from a table by the fragment's ``executor`` kind."""

from __future__ import annotations

import importlib

from fragments.executors._base import Executor, FragmentExecutionError, Transport
from msrl.core import ConfigError
from policies import FragmentSpec

EXECUTORS = {
    "cpu": "fragments.executors.cpu:CpuExecutor",
    "torch": "fragments.executors.torch:TorchExecutor",
    "cuda": "fragments.executors.cuda:CudaExecutor",
}


def get_executor(kind: str) -> type[Executor]:
    if kind not in EXECUTORS:
        raise ConfigError(f"unknown executor {kind!r}; valid choices: {', '.join(sorted(EXECUTORS))}")
    module_name, _, class_name = EXECUTORS[kind].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def check_fragment(spec: FragmentSpec, on_this_machine: bool) -> None:
    """Raise a one-line ``ConfigError`` if fragment ``spec`` cannot run: an unknown executor, a
    device that is no torch device or not one its executor runs on (``Executor.check_spec``,
    true on every machine), and with ``on_this_machine`` what this machine lacks for it (a GPU,
    pycuda: ``Executor.check_available``)."""
    if spec.executor not in EXECUTORS:
        raise ConfigError(
            f"fragment {spec.name!r}: unknown executor {spec.executor!r}; valid choices: {', '.join(sorted(EXECUTORS))}"
        )
    executor = get_executor(spec.executor)
    if on_this_machine:
        executor.check_available(spec)
    else:
        executor.check_spec(spec)


__all__ = ["EXECUTORS", "Executor", "FragmentExecutionError", "Transport", "check_fragment", "get_executor"]
