"""msrl's application layer, the top of the stack: the run loop, checkpoints,
evaluation and the command line, on everything below (``msrl.core``,
``algorithms``, ``policies``, ``fragments``, ``cluster``).

Its public names are also ``msrl``'s: ``msrl.train``, ``msrl.evaluate``,
``msrl.load``.  ``Trainer`` drives a run one iteration at a time, ``RunDirectory`` keeps its files; ``compare`` runs a
config under several policies (``msrl compare``), ``plot_curves`` draws learning curves;
``load_checkpoint`` / ``save_checkpoint`` read and write verified checkpoint files.  ``msrl.app.gate``
(imported on its own) is the learning gate: does msrl still learn, against stored bands.
"""

from msrl.app._checkpoint import load_checkpoint, save_checkpoint
from msrl.app._cli import main
from msrl.app._compare import Comparison, compare
from msrl.app._config import LoadedConfig, RunConfig, load_config
from msrl.app._evaluate import Evaluation
from msrl.app._load import evaluate, load
from msrl.app._plan import Plan, make_runtime, plan
from msrl.app._plots import plot_curves, plot_time_split
from msrl.app._registry import algorithm_names, get_algorithm
from msrl.app._run import Run, Trainer, train
from msrl.app._run_directory import CHECKPOINT_NAME, EVAL_NAME, METRICS_NAME, Position, RunDirectory, read_metrics

__all__ = [
    "CHECKPOINT_NAME",
    "EVAL_NAME",
    "METRICS_NAME",
    "Comparison",
    "Evaluation",
    "LoadedConfig",
    "Plan",
    "Position",
    "Run",
    "RunConfig",
    "RunDirectory",
    "Trainer",
    "algorithm_names",
    "compare",
    "evaluate",
    "get_algorithm",
    "load",
    "load_checkpoint",
    "load_config",
    "main",
    "make_runtime",
    "plan",
    "plot_curves",
    "plot_time_split",
    "read_metrics",
    "save_checkpoint",
    "train",
]
