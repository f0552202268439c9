"""Interface transport between fragment-worker actors.

A sending replica hands each value straight to the receiving replica, never
through the driver: over a Unix socket when both are on the same node
(``cluster._direct``: about 0.2 ms a message), otherwise by calling
``deliver`` on the receiver's actor, fire and forget (Ray moves large
arguments through its object store and inlines small ones; a call costs
1-3 ms).  Messages are keyed by (node, source replica, sequence number)
because deliveries on different threads may land out of order.

A value whose answer comes back in the same block of the program (``calls``,
see ``cluster._callreply``) goes to another node as one call that returns the
answer, instead of two one-way calls.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Set as AbstractSet
from typing import Any

from cluster._callreply import CallRoutes, ReplySlots, await_reply
from fragments import FragmentedGraph, FragmentProgram, Recv, ReplicaId, check_flat, combine, route, sources

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

    def holds(self, node: str, src: int, seq: int) -> bool:
        with self.cond:
            return (node, src, seq) in self.messages

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

    ``calls`` (``cluster._callreply.call_routes``) names the values sent to
    another node as a call whose reply is the answer; ``replies`` holds this
    replica's own waiting callers, whose answers ``send`` hands back to them.
    ``counts`` says how many payloads went each way (``socket``, ``deliver``,
    ``call``, ``reply``).
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
        direct: dict[ReplicaId, Any] | None = None,
        calls: CallRoutes | None = None,
        replies: ReplySlots | None = None,
    ) -> None:
        self.fdg, self.program, self.replica, self.mailbox, self.peers = fdg, program, replica, mailbox, peers
        self.direct = direct or {}  # replica -> DirectSender, for values to same-node peers
        self.stale_ok, self.max_lag = stale_ok, max_lag
        self.sent: dict[tuple[str, str], int] = {}
        self.received: dict[tuple[str, int], int] = {}
        self.held: dict[str, tuple] = {}
        self.policy_lag = 0
        self.checked: set[str] = set()  # nodes whose first value was checked flat (fragments.FLAT_RULE)
        self.calls = calls or {}
        self.replies = replies or ReplySlots()
        self.awaiting: dict[tuple[str, int], deque[Any]] = {}  # (answer node, callee replica) -> call refs
        answered_by = {r.name: r for r in program.recvs()}
        self.answerers = {  # answer node -> the callee replicas that answer this replica
            reply: set(sources(answered_by[reply].interfaces, replica, fdg.fragments[callee].replicas))
            for (_, callee), reply in self.calls.items()
        }
        self.counts: Counter[str] = Counter()

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
            reply = self.calls.get((node, dst))
            for replica, payload in route(value, interfaces, self.replica, len(handles)).items():
                sender = self.direct.get(ReplicaId(dst, replica))
                if self.replies.answer(node, dst, replica, seq, payload):
                    self.counts["reply"] += 1
                elif sender is not None:
                    sender.deliver(node, self.replica, seq, payload)
                    self.counts["socket"] += 1
                elif reply is not None and replica in self.answerers[reply]:
                    call = handles[replica].deliver_and_await.options(concurrency_group="reply")
                    ref = call.remote(node, self.replica, seq, payload, reply, self.program.fragment)
                    self.awaiting.setdefault((reply, replica), deque()).append(ref)
                    self.counts["call"] += 1
                else:
                    handles[replica].deliver.remote(node, self.replica, seq, payload)
                    self.counts["deliver"] += 1

    def recv(self, step: Recv) -> tuple:
        src_fragment = step.interfaces[0].src
        parts = []
        for src in sources(step.interfaces, self.replica, self.fdg.fragments[src_fragment].replicas):
            seq = self.received.get((step.name, src), 0)
            self.received[(step.name, src)] = seq + 1
            if step.name in self.stale_ok:
                parts.append(self._lagged(step.name, src, seq))
            else:
                parts.append(self._take(step.name, src, seq))
        return combine(parts, step.interfaces)

    def _take(self, node: str, src: int, seq: int) -> Any:
        """Message ``seq``, after the answers to this replica's calls for ``node`` are in the
        mailbox.  An answer that never comes (the callee closed or was lost) leaves the wait to
        the mailbox, which ends when this worker closes, as for a message that never comes."""
        refs = self.awaiting.get((node, src))
        while refs and not self.mailbox.holds(node, src, seq):
            answer = await_reply(refs.popleft(), lambda: self.mailbox.closed)
            if answer is not None:
                self.mailbox.put(node, src, *answer)
        return self.mailbox.take(node, src, seq)

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
