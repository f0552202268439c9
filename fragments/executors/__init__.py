"""Executors, chosen from a table by the fragment's ``executor`` kind."""

from __future__ import annotations

import importlib

from msrl.core import ConfigError
from fragments.executors._base import Executor, FragmentExecutionError, Transport

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


__all__ = ["EXECUTORS", "Executor", "FragmentExecutionError", "Transport", "get_executor"]
