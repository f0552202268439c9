"""TensorBoard event files beside ``metrics.jsonl``: the same scalars, one point per
iteration at its ``env_steps`` (``tensorboard --logdir runs/``).

Written with ``tensorboardX``, a maintained writer that needs only numpy, packaging and
protobuf (which Ray already brings); ``torch.utils.tensorboard.SummaryWriter`` would need
the whole ``tensorboard`` package (its server and web app included) at run time.  We use
tensorboardX's synchronous ``EventsWriter``, not its ``SummaryWriter``: that one hands
events to a background thread, and its ``flush()`` does not wait for them, so a crash (or
a copy of the run directory) right after a flush could miss the last record's values.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.summary import scalar


class ScalarLog:
    """An event file in ``run_dir`` holding every finite number of each metrics record.

    A resumed run passes ``purge_step``, the first env step after its checkpoint:
    TensorBoard then hides the events the interrupted run wrote from that step on,
    as ``metrics.jsonl`` drops their records."""

    def __init__(self, run_dir: str, purge_step: int | None = None) -> None:
        # files are named by the second; the suffix keeps a resume started within the same
        # second from overwriting the earlier file, and sorts the two in the order written
        self.events = EventsWriter(os.path.join(run_dir, "events"), f".{time.time_ns()}")
        if purge_step is not None:  # what SummaryWriter(purge_step=...) writes
            self.events.write_event(
                Event(wall_time=time.time(), step=purge_step, session_log=SessionLog(status=SessionLog.START))
            )
        self.events.flush()

    def write(self, record: Mapping[str, Any]) -> None:
        """Add the record's numeric, finite values (``iteration`` too) at step ``record["env_steps"]``, and flush."""
        step, wall_time = int(record["env_steps"]), time.time()
        for key, value in record.items():
            if key != "env_steps" and isinstance(value, (int, float)) and math.isfinite(value):
                self.events.write_event(Event(wall_time=wall_time, step=step, summary=scalar(key, value)))
        self.events.flush()

    def close(self) -> None:
        self.events.close()
