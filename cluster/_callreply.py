"""Call and reply between nodes: one Ray actor call carries a value and brings back its answer.

Between nodes the transport's messages are Ray actor calls.  Where a fragment sends a value and
then, in the same block of its program, receives the receiver's answer
(``fragments.reply_pairs``: under ``single_learner_fine`` the learner's actions down and the env's
observations back, every env step), two one-way calls made a round trip of about 5 ms on the
testbed, against 1.2-1.8 ms for one call and its reply (BENCHMARKS.md, "Per-step transport").

So the caller calls ``deliver_and_await`` on the callee's actor and keeps the returned object ref
(``RayTransport.awaiting``); the callee puts the value in its mailbox, as ``deliver`` does, and its
actor thread then waits in ``ReplySlots`` until its own transport sends the answer to that caller
replica, which is handed to the waiting call (with its sequence number) instead of being
delivered; the caller's receive of the answer resolves the ref.

Why it cannot starve or deadlock: the waiting calls run in the actor's own ``reply`` concurrency
group of ``REPLY_SLOTS`` threads, so deliveries, iterations, liveness checks and ``close`` never
wait behind them.  A caller replica has at most one call of a pair in flight (it receives the
answer before it sends again), and ``call_routes`` keeps only as many pairs per callee as its
group has threads.  The callee receives the call's value before it runs the answer, so every call
is answered within the same iteration of both.  A closed callee answers ``None``; a lost one
makes the ref raise: the caller then waits for its own mailbox to close, exactly as it waits on a
one-way message that never comes, and the driver's liveness check finds the lost worker.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from fragments import FragmentedGraph, reply_pairs, sources
from msrl.core import InterfaceOp

REPLY_SLOTS = 4
"""Threads of a worker's ``reply`` concurrency group: calls of call-and-reply pairs it may hold
waiting for their answer at once."""
POLL_S = 1.0

CallRoutes = dict[tuple[str, str], str]
"""One caller fragment's pairs: (node it sends, callee fragment) -> the node answered with."""

Reply = tuple[int, Any]
"""An answer: its sequence number and payload."""


def call_routes(fdg: FragmentedGraph, stale_ok: dict[str, set[str]], slots: int = REPLY_SLOTS) -> dict[str, CallRoutes]:
    """Caller fragment -> its call-and-reply routes: ``fdg``'s pairs whose two values are both
    taken exactly (a stale-ok one may skip messages, so calls and answers would not match one to
    one), as many per callee as it has ``slots`` for calls from all its callers' replicas."""
    routes: dict[str, CallRoutes] = {}
    held: dict[str, int] = {}  # callee -> calls its replicas may hold at once
    for pair in reply_pairs(fdg):
        if pair.reply in stale_ok.get(pair.caller, set()) or pair.send in stale_ok.get(pair.callee, set()):
            continue
        interfaces = [i for i in fdg.interfaces if i.src == pair.caller and i.dst == pair.callee]
        carried = [i for i in interfaces if i.op is not InterfaceOp.ALL_REDUCE and i.ref.node == pair.send]
        callers = len(sources(carried, 0, fdg.fragments[pair.caller].replicas))
        if held.get(pair.callee, 0) + callers > slots:
            continue
        held[pair.callee] = held.get(pair.callee, 0) + callers
        routes.setdefault(pair.caller, {})[(pair.send, pair.callee)] = pair.reply
    return routes


class ReplySlots:
    """The callee's side: calls waiting for their answer, first come first answered, per
    (answer node, caller fragment, caller replica)."""

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, str, int], deque[list[Reply]]] = {}
        self.cond = threading.Condition()
        self.closed = False

    def open(self, node: str, fragment: str, replica: int) -> list[Reply]:
        """A slot for the next answer ``node`` to ``fragment``'s ``replica`` (opened before the
        call's value reaches the mailbox, so the answer cannot miss it)."""
        slot: list[Reply] = []
        with self.cond:
            self.waiting.setdefault((node, fragment, replica), deque()).append(slot)
        return slot

    def answer(self, node: str, fragment: str, replica: int, seq: int, payload: Any) -> bool:
        """Hand ``payload`` to the oldest call waiting for it; ``False`` where none waits."""
        with self.cond:
            queue = self.waiting.get((node, fragment, replica))
            if not queue:
                return False
            queue.popleft().append((seq, payload))
            self.cond.notify_all()
            return True

    def wait(self, slot: list[Reply]) -> Reply | None:
        """The slot's answer, or ``None`` once the worker closes."""
        with self.cond:
            while not slot:
                if self.closed:
                    return None
                self.cond.wait(POLL_S)
            return slot[0]

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def await_reply(ref: Any, closed: Callable[[], bool]) -> Reply | None:
    """The answer ``ref`` (a ``deliver_and_await`` call) brings, or ``None`` where it brings none
    (the callee closed, or was lost) or ``closed()`` turns true while it waits."""
    import ray
    from ray.exceptions import GetTimeoutError, RayError

    while not closed():
        try:
            reply: Reply | None = ray.get(ref, timeout=POLL_S)
        except GetTimeoutError:
            continue
        except RayError:  # lost or failed: the driver's liveness check names it
            return None
        return reply
    return None
