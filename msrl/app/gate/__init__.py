"""msrl's learning gate: does msrl still learn?  PPO, A2C and DQN train CartPole at reduced
budgets on fixed seeds under the synchronous ``local`` policy (``GATE_ROWS``), and what they reach
(the final greedy return, the seeds that reach the solved threshold, the env steps to it, the
training return over the run) is held to stored bands (``bands.json`` beside this module) set from
a calibration on more seeds.  CI runs it on every landing (``make test-landing``):

    python -m msrl.app.gate                  # the rows against the bands: exit 1 outside them
    python -m msrl.app.gate --write-bands    # calibrate on seeds 0-7 and write the bands
    python -m msrl.app.gate --rederive       # the bands again from the recorded calibrations, no runs
    python -m msrl.app.gate --check RESULT   # compare a saved gate.json only

It trains the shipped configs of a source checkout (``configs/``) with the rows' overrides.  Its
records of a run (``TrainingRecord``: final greedy returns, training episodes, the rolling mean of
the last ``WINDOW`` of them) are also what benchmarks comparing msrl with other frameworks keep.
"""

from msrl.app.gate._bands import (
    BANDS_FILE,
    METRICS,
    BandsError,
    bands_for,
    check_bands,
    load_json,
    rederive,
)
from msrl.app.gate._cli import main, run_gate
from msrl.app.gate._records import WINDOW, CurvePoint, EpisodeBatch, TrainingRecord, record_of, train_and_record
from msrl.app.gate._rows import CALIBRATION_SEEDS, GATE_ROWS, MARGINS, RANDOM_RETURN, GateRow

__all__ = [
    "BANDS_FILE",
    "CALIBRATION_SEEDS",
    "GATE_ROWS",
    "MARGINS",
    "METRICS",
    "RANDOM_RETURN",
    "WINDOW",
    "BandsError",
    "CurvePoint",
    "EpisodeBatch",
    "GateRow",
    "TrainingRecord",
    "bands_for",
    "check_bands",
    "load_json",
    "main",
    "record_of",
    "rederive",
    "run_gate",
    "train_and_record",
]
