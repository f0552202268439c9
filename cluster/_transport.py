"""Interface transport between fragment-worker actors.

A sending replica hands each value straight to the receiving replica, never
through the driver: over a Unix socket when both are on the same node
(``cluster._direct``: about 0.2 ms a message), otherwise by calling
``deliver`` on the receiver's actor, fire and forget (Ray moves large
arguments through its object store and inlines small ones; a call costs
1-3 ms).  Messages are keyed by (node, source replica, sequence number)
because deliveries on different threads may land out of order.
"""

from __future__ import annotations

import threading
from collections.abc import Set as AbstractSet
from typing import Any

from fragments import FragmentedGraph, FragmentProgram, Recv, check_flat, combine, route, sources

POLL_S = 1.0


class MailboxClosed(RuntimeError):
    """The worker is shutting down while a receive waited."""


class Mailbox:
    """Messages delivered to one replica, waiting to be received in order."""

    def __init__(self) -> None:
        self.messages: dict[tuple[str, int, int], Any] = {}
        self.cond = threading.Condition()
        self.closed = False

    def put(self, node: str, src: int, seq: int, payload: Any) -> None:
        with self.cond:
            self.messages[(node, src, seq)] = payload
            self.cond.notify_all()

    def take(self, node: str, src: int, seq: int) -> Any:
        key = (node, src, seq)
        with self.cond:
            while key not in self.messages:
                if self.closed:
                    raise MailboxClosed(f"stopped while waiting for {node} from replica {src}")
                self.cond.wait(POLL_S)
            return self.messages.pop(key)

    def take_skipping(self, node: str, src: int, seq: int) -> Any:
        """Message ``seq``, dropping the older ones of that sender that were never taken."""
        payload = self.take(node, src, seq)
        with self.cond:
            for key in [k for k in self.messages if k[0] == node and k[1] == src and k[2] < seq]:
                del self.messages[key]
        return payload

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class RayTransport:
    """``fragments.executors.Transport`` over Ray actor calls.

    ``stale_ok`` (async policies) names received nodes that may lag: they are
    taken ``max_lag`` sends behind, so the receiver does not wait for the
    newest; the lag is recorded as ``policy_lag``.
    """

    def __init__(
        self,
        fdg: FragmentedGraph,
        program: FragmentProgram,
        replica: int,
        mailbox: Mailbox,
        peers: dict[str, list[Any]],
        stale_ok: AbstractSet[str] = frozenset(),
        max_lag: int = 1,
        direct: dict[tuple[str, int], Any] | None = None,
    ) -> None:
        self.fdg, self.program, self.replica, self.mailbox, self.peers = fdg, program, replica, mailbox, peers
        self.direct = direct or {}  # (fragment, replica) -> DirectSender, for values to same-node peers
        self.stale_ok, self.max_lag = stale_ok, max_lag
        self.sent: dict[tuple[str, str], int] = {}
        self.received: dict[tuple[str, int], int] = {}
        self.held: dict[str, tuple] = {}
        self.policy_lag = 0
        self.checked: set[str] = set()  # nodes whose first value was checked flat (fragments.FLAT_RULE)

    def send(self, node: str, value: tuple) -> None:
        if node not in self.checked:  # a node's first value: flat, or a one-line error naming node and path
            check_flat(value, (i.ref.index for i in self.program.sends[node]), node, self.program.fragment)
            self.checked.add(node)
        by_dst: dict[str, list] = {}
        for interface in self.program.sends[node]:
            by_dst.setdefault(interface.dst, []).append(interface)
        for dst, interfaces in by_dst.items():
            seq = self.sent.get((node, dst), 0)
            self.sent[(node, dst)] = seq + 1
            handles = self.peers[dst]
            for replica, payload in route(value, interfaces, self.replica, len(handles)).items():
                sender = self.direct.get((dst, replica))
                if sender is not None:
                    sender.deliver(node, self.replica, seq, payload)
                else:
                    handles[replica].deliver.remote(node, self.replica, seq, payload)

    def recv(self, step: Recv) -> tuple:
        src_fragment = step.interfaces[0].src
        parts = []
        for src in sources(step.interfaces, self.replica, self.fdg.fragments[src_fragment].replicas):
            seq = self.received.get((step.name, src), 0)
            self.received[(step.name, src)] = seq + 1
            if step.name in self.stale_ok:
                parts.append(self._lagged(step.name, src, seq))
            else:
                parts.append(self.mailbox.take(step.name, src, seq))
        return combine(parts, step.interfaces)

    def _lagged(self, node: str, src: int, seq: int) -> tuple:
        """The value sent ``max_lag`` sends before the one a sync policy would wait
        for (the first is always awaited).  A fixed lag rather than "the newest
        that has arrived" keeps async runs reproducible: what the actors act with
        never depends on timing."""
        version = max(0, seq - self.max_lag)
        if self.held.get(node, (None,))[0] != version:
            self.held[node] = (version, self.mailbox.take_skipping(node, src, version))
        self.policy_lag = seq - version
        return self.held[node][1]
