"""Frames cross a cut edge as the bytes they are: a rollout of uint8 observations keeps its dtype
and its values through the same-node path (a ``DirectSender`` to a replica's ``DirectListener``),
a large one through shared memory that the learner reads in place, a small one through the socket
at one byte a pixel, not four as float32 would make it."""

from __future__ import annotations

import os
import socket
from typing import Any

import torch

from cluster import SHARED_MIN_BYTES, DirectListener, DirectSender, Mailbox
from fragments import flat_violation
from msrl.rl import RolloutBatch, RolloutBuffer


def _frame_rollout(steps: int = 16, envs: int = 8) -> RolloutBatch:
    buffer = RolloutBuffer(steps, envs, (4, 84, 84), obs_dtype=torch.uint8)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        obs = torch.randint(0, 256, (envs, 4, 84, 84), dtype=torch.uint8, generator=generator)
        zeros = torch.zeros(envs)
        buffer.insert(obs, torch.zeros(envs, dtype=torch.int64), zeros, zeros, zeros, zeros, zeros)
    batch = buffer.drain(torch.zeros(envs))
    assert isinstance(batch, RolloutBatch)
    return batch


class Counting:
    """A sender's socket, counting the bytes written to it."""

    def __init__(self, sock: socket.socket, sent: list[int]) -> None:
        self.sock, self.sent = sock, sent

    def sendall(self, data: Any) -> None:
        self.sent.append(len(data))
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


def _send(batch: RolloutBatch) -> tuple[RolloutBatch, int, list[str]]:
    """``batch`` through a ``DirectSender`` to a ``DirectListener``: what arrived, the bytes the
    socket carried, and the files left in the listener's directory once it arrived."""
    mailbox = Mailbox()
    listener = DirectListener(mailbox, "learner")
    sender = DirectSender(listener.path)
    sent: list[int] = []
    sender.sock = Counting(sender.sock, sent)  # type: ignore[assignment]
    try:
        sender.deliver("learner", 0, 1, batch)
        received = mailbox.take("learner", 0, 1)
        left = sorted(os.listdir(listener.directory))
    finally:
        sender.close()
        listener.close()
    assert not os.path.exists(listener.directory)
    return received, sum(sent), left


def test_a_rollout_of_frames_crosses_unchanged_through_shared_memory() -> None:
    """A rollout of frames (2.3 MB of uint8) crosses as its own bytes in a shared-memory file: the
    socket carries only the rest (under 16 kB), the file is gone once the message has arrived, and
    the learner's observations are the shared memory itself, not a copy of it."""
    batch = _frame_rollout()
    assert flat_violation(batch) is None  # what may cross a cut edge
    assert batch.obs.dtype == torch.uint8 and batch.obs.shape == (128, 4, 84, 84)
    assert batch.obs.numel() >= SHARED_MIN_BYTES
    received, socket_bytes, left = _send(batch)
    assert received.obs.dtype == torch.uint8 and torch.equal(received.obs, batch.obs)
    assert all(torch.equal(a, b) for a, b in zip(received, batch))
    assert socket_bytes < 16_384
    assert left == ["learner.sock"]  # the segment was unlinked when it was mapped
    assert "segment-" in _mapping_of(received.obs.data_ptr())  # the unlinked file's pages, mapped


def _mapping_of(address: int) -> str:
    """The line of ``/proc/self/maps`` whose range holds ``address``."""
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            if low <= address < high:
                return line
    return ""


def test_small_frames_cross_inline_as_uint8_bytes() -> None:
    """Below ``SHARED_MIN_BYTES`` frames go through the socket, one byte a pixel."""
    batch = _frame_rollout(steps=2, envs=2)
    assert batch.obs.numel() < SHARED_MIN_BYTES
    received, socket_bytes, left = _send(batch)
    assert torch.equal(received.obs, batch.obs) and left == ["learner.sock"]
    frame_bytes = batch.obs.numel()
    assert frame_bytes <= socket_bytes < 1.05 * frame_bytes + 16_384  # one byte a pixel, plus the other fields
