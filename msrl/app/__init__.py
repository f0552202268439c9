"""msrl's application layer, the top of the stack: the run loop, checkpoints,
evaluation and the command line, on everything below (``msrl.core``,
``algorithms``, ``policies``, ``fragments``, ``cluster``).

Its public names are also ``msrl``'s: ``msrl.train``, ``msrl.evaluate``,
``msrl.load``.  ``Trainer`` drives a run one iteration at a time, ``RunDirectory`` keeps its files; ``compare`` runs a
config under several policies (``msrl compare``), ``plot_curves`` draws learning curves;
``load_checkpoint`` / ``save_checkpoint`` read and write verified checkpoint files.  ``msrl.app.gate``
(imported on its own) is the learning gate: does msrl still learn, against stored bands.

Each name is imported on first use (``_WHERE``): the ``msrl`` command imports torch, Ray,
matplotlib and the algorithms only for what it runs, so an error in a config answers at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from msrl.app._auto import (
        PlacementPlan,
        calibrate_run,
        hypothetical_cluster,
        rank_policies,
        read_calibration,
        this_machine,
    )
    from msrl.app._checkpoint import load_checkpoint, save_checkpoint
    from msrl.app._cli import main
    from msrl.app._compare import Comparison, compare
    from msrl.app._config import LoadedConfig, RunConfig, load_config
    from msrl.app._elastic import fitting_counts
    from msrl.app._evaluate import Evaluation
    from msrl.app._load import evaluate, load
    from msrl.app._plan import Plan, make_runtime, plan
    from msrl.app._plots import plot_curves, plot_time_split
    from msrl.app._record import Recording, record
    from msrl.app._registry import algorithm_names, config_fields, get_algorithm
    from msrl.app._run import Interrupted, Run, Trainer, train
    from msrl.app._run_directory import (
        CHECKPOINT_NAME,
        EVAL_NAME,
        METRICS_NAME,
        Position,
        RunDirectory,
        read_metrics,
    )

_WHERE = {
    "_auto": (
        "PlacementPlan",
        "calibrate_run",
        "hypothetical_cluster",
        "rank_policies",
        "read_calibration",
        "this_machine",
    ),
    "_checkpoint": ("load_checkpoint", "save_checkpoint"),
    "_cli": ("main",),
    "_compare": ("Comparison", "compare"),
    "_config": ("LoadedConfig", "RunConfig", "load_config"),
    "_elastic": ("fitting_counts",),
    "_evaluate": ("Evaluation",),
    "_load": ("evaluate", "load"),
    "_plan": ("Plan", "make_runtime", "plan"),
    "_plots": ("plot_curves", "plot_time_split"),
    "_record": ("Recording", "record"),
    "_registry": ("algorithm_names", "config_fields", "get_algorithm"),
    "_run": ("Interrupted", "Run", "Trainer", "train"),
    "_run_directory": ("CHECKPOINT_NAME", "EVAL_NAME", "METRICS_NAME", "Position", "RunDirectory", "read_metrics"),
}
"""The module of this package that defines each public name."""
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "CHECKPOINT_NAME",
    "EVAL_NAME",
    "METRICS_NAME",
    "Comparison",
    "Evaluation",
    "Interrupted",
    "LoadedConfig",
    "Plan",
    "PlacementPlan",
    "Position",
    "Recording",
    "Run",
    "RunConfig",
    "RunDirectory",
    "Trainer",
    "algorithm_names",
    "calibrate_run",
    "compare",
    "config_fields",
    "evaluate",
    "fitting_counts",
    "get_algorithm",
    "hypothetical_cluster",
    "load",
    "load_checkpoint",
    "load_config",
    "main",
    "make_runtime",
    "plan",
    "plot_curves",
    "rank_policies",
    "read_calibration",
    "plot_time_split",
    "read_metrics",
    "record",
    "save_checkpoint",
    "this_machine",
    "train",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'msrl.app' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"msrl.app.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
