"""TensorBoard event files beside ``metrics.jsonl``: the same scalars, one point per
iteration at its ``env_steps`` (``tensorboard --logdir runs/``).

The events are tensorboardX's protocol buffers (``Event``, ``Summary``), framed as TensorBoard
reads them (TFRecord: length, its masked CRC-32C, the event, its masked CRC-32C).  The framing is
written here rather than through tensorboardX's ``EventsWriter`` for two costs a run pays every
iteration: that writer's ``flush`` is an ``fsync``, and it computes the CRC in pure Python (about
0.2 ms for one record's event on the 2-core VM, where ``google_crc32c`` takes a microsecond).  So
each record is one event holding all its scalars, flushed to the operating system at once (a
crashed or copied run loses nothing already recorded), and made durable on disk with the
checkpoint (``sync``): a machine that goes down loses no event the checkpoint it resumes from
needs.  tensorboardX's ``SummaryWriter`` would instead hand events to a background thread whose
``flush()`` does not wait for them.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any

import google_crc32c
from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.proto.summary_pb2 import Summary

FILE_VERSION = "brain.Event:2"
"""What the first event of every event file says (TensorBoard's reader checks it)."""


def _masked_crc(data: bytes) -> bytes:
    """TFRecord's masked CRC-32C of ``data``, as 4 little-endian bytes."""
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


class ScalarLog:
    """An event file in ``run_dir`` holding every finite number of each metrics record.

    A resumed run passes ``purge_step``, the first env step after its checkpoint:
    TensorBoard then hides the events the interrupted run wrote from that step on,
    as ``metrics.jsonl`` drops their records."""

    def __init__(self, run_dir: str, purge_step: int | None = None) -> None:
        # files are named as TensorBoard's writers name them; the nanoseconds keep a resume started
        # within the same second from overwriting the earlier file, and sort the two in the order written
        now = time.time()
        name = f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{time.time_ns()}"
        self.path = os.path.join(run_dir, name)
        self._file = open(self.path, "ab")
        self._write(Event(wall_time=now, file_version=FILE_VERSION))
        if purge_step is not None:  # what SummaryWriter(purge_step=...) writes
            self._write(Event(wall_time=now, step=purge_step, session_log=SessionLog(status=SessionLog.START)))
        self._file.flush()

    def _write(self, event: Event) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + _masked_crc(header) + data + _masked_crc(data))

    def write(self, record: Mapping[str, Any]) -> None:
        """Add the record's numeric, finite values (``iteration`` too) at step ``record["env_steps"]``,
        as one event, and flush it to the operating system."""
        values = [
            Summary.Value(tag=key, simple_value=float(value))
            for key, value in record.items()
            if key != "env_steps" and isinstance(value, (int, float)) and math.isfinite(value)
        ]
        self._write(Event(wall_time=time.time(), step=int(record["env_steps"]), summary=Summary(value=values)))
        self._file.flush()

    def sync(self) -> None:
        """Make what was written durable on disk (``fsync``)."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()
