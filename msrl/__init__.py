"""msrl: write an RL algorithm once as a training loop over components; run it
on one process or a Ray cluster by switching the distribution policy in config.

This module is the public face of both halves of the ``msrl`` package: the
core an algorithm is written against (``msrl.core``: components, tracing,
errors...) and the application on top (``msrl.app``: ``train``, ``evaluate``,
``load``).  The application's names are imported on first use, so
``import msrl`` stays light and the packages under the application
(``fragments``, ``cluster``...) can import ``msrl.core`` while this module is
still being initialised.

Example::

    import msrl

    run = msrl.train("configs/ppo_cartpole.yaml", overrides=["total_env_steps=20000"])
    print(run.run_dir, len(run.metrics), run.evaluation.mean)
"""

from typing import Any

from msrl.core import (
    Actor,
    AgentGroup,
    Algorithm,
    Batched,
    Box,
    Buffer,
    BuildError,
    CheckpointError,
    Component,
    ConfigError,
    DataflowGraph,
    DatasetError,
    Deferred,
    Discrete,
    DivergenceError,
    EnvError,
    Environment,
    Global,
    HiddenStateError,
    Learner,
    MsrlError,
    NoValue,
    RunInfo,
    Space,
    StorageError,
    TraceError,
    WorkerLostError,
    deferred,
    split,
    steps,
    trace,
)

__version__ = "0.1.0"

_APPLICATION = ("Evaluation", "Run", "evaluate", "load", "train")

__all__ = [
    "Actor",
    "AgentGroup",
    "Algorithm",
    "Batched",
    "Box",
    "Buffer",
    "BuildError",
    "CheckpointError",
    "StorageError",
    "Component",
    "ConfigError",
    "DataflowGraph",
    "DatasetError",
    "Deferred",
    "Discrete",
    "DivergenceError",
    "EnvError",
    "Environment",
    "Evaluation",
    "Global",
    "HiddenStateError",
    "Learner",
    "MsrlError",
    "NoValue",
    "Run",
    "RunInfo",
    "Space",
    "TraceError",
    "WorkerLostError",
    "deferred",
    "evaluate",
    "load",
    "split",
    "steps",
    "trace",
    "train",
]


def __getattr__(name: str) -> Any:
    if name in _APPLICATION:
        from msrl import app

        return getattr(app, name)
    raise AttributeError(f"module 'msrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_APPLICATION))
