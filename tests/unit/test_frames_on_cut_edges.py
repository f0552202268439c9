"""Frames cross a cut edge as the bytes they are: a rollout of uint8 observations keeps its dtype
and its values through the same-node path (a ``DirectSender`` to a replica's ``DirectListener``)
and is about as large on the wire as in memory, not four times as large as float32 would make it."""

from __future__ import annotations

import socket
from typing import Any

import torch

from cluster import DirectListener, DirectSender, Mailbox
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


def test_a_rollout_of_frames_crosses_unchanged_as_uint8_bytes() -> None:
    batch = _frame_rollout()
    assert flat_violation(batch) is None  # what may cross a cut edge
    assert batch.obs.dtype == torch.uint8 and batch.obs.shape == (128, 4, 84, 84)
    mailbox = Mailbox()
    listener = DirectListener(mailbox, "learner")
    sender = DirectSender(listener.path)
    sent: list[int] = []

    class Counting:  # the sender's socket, counting the bytes it writes
        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock

        def sendall(self, data: Any) -> None:
            sent.append(len(data))
            self.sock.sendall(data)

        def close(self) -> None:
            self.sock.close()

    sender.sock = Counting(sender.sock)  # type: ignore[assignment]
    try:
        sender.deliver("learner", 0, 1, batch)
        received = mailbox.take("learner", 0, 1)
    finally:
        sender.close()
        listener.close()
    assert received.obs.dtype == torch.uint8 and torch.equal(received.obs, batch.obs)
    assert all(torch.equal(a, b) for a, b in zip(received, batch))
    frame_bytes = batch.obs.numel()
    assert frame_bytes <= sum(sent) < 1.05 * frame_bytes + 16_384  # one byte a pixel, plus the other fields
