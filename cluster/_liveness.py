"""Liveness: every wait of the driver on its workers has a bound.

While a wait on worker calls lasts longer than ``LIVENESS_POLL_S``, every worker is pinged (on a
thread of its own, answered even while it computes); one that died, or that does not answer within
the run's ``liveness_timeout_s``, ends the wait with a one-line ``WorkerLostError`` naming it, which
the run loop turns into a restart from the last checkpoint.  A peer blocked on a lost worker would
otherwise wait for it forever.  The cluster's head (its GCS) is checked first: one that accepts no
connection for ``liveness_timeout_s`` ends the run with ``HeadLostError`` (no Ray cluster goes on
without its head, and Ray itself ends a driver that lost its GCS for 60 s with no word on the run).
"""

from __future__ import annotations

from typing import Any

from cluster._hosts import head_silent_for
from fragments import ReplicaId
from msrl.core import HeadLostError, MsrlError, WorkerLostError

LIVENESS_POLL_S = 2.0
"""A wait on workers that takes longer than this checks that every worker still answers."""
LIVENESS_TIMEOUT_S = 30.0
"""Default bound on a liveness check: a worker that does not answer within it counts as stuck."""


class Liveness:
    """Waits on the calls made to ``workers`` (fragment -> one actor handle per replica), checking
    while it waits that every worker still answers."""

    def __init__(
        self,
        workers: dict[str, list[Any]],
        timeout_s: float = LIVENESS_TIMEOUT_S,
        where: dict[ReplicaId, str] | None = None,
    ) -> None:
        self.workers = workers
        self.timeout_s = timeout_s
        self.where = where or {}
        """Replica -> where it runs (``node 10.0.0.5``), named when it is lost."""

    def name(self, key: ReplicaId) -> str:
        where = self.where.get(key)
        return f"fragment {key}" + (f" on {where}" if where else "")

    def wait_one(self, refs: list[Any]) -> Any:
        """The first of ``refs`` to finish.  While none does, every worker is checked every
        ``LIVENESS_POLL_S``: a dead or stuck one ends the wait with ``WorkerLostError``."""
        import ray

        while True:
            ready, _ = ray.wait(refs, num_returns=1, timeout=LIVENESS_POLL_S)
            if ready:
                return ready[0]
            self.check_alive()

    def wait_all(self, calls: list[tuple[ReplicaId, Any]]) -> list[Any]:
        """The results of ``calls`` ((replica, object ref) pairs) in order, with liveness checks
        while waiting."""
        import ray

        refs = [ref for _, ref in calls]
        while True:
            _, waiting = ray.wait(refs, num_returns=len(refs), timeout=LIVENESS_POLL_S)
            if not waiting:
                return [self.result(key, ref) for key, ref in calls]
            self.check_alive()

    def result(self, key: ReplicaId, ref: Any) -> Any:
        """``ray.get`` of one replica's finished call: an msrl error raised in it as itself, the
        replica's death as ``WorkerLostError`` naming it."""
        return get(ref, who=self.name(key))

    def check_alive(self) -> None:
        """Ping every worker; one that died raises ``WorkerLostError``, and so does one that does not
        answer within ``timeout_s`` (stopped, hung or cut off), after it is killed.  The head first:
        silent for ``timeout_s``, it raises ``HeadLostError``."""
        import ray

        check_head(self.timeout_s)

        pings = {
            ReplicaId(name, replica): handle.ping.options(concurrency_group="liveness").remote()
            for name, handles in self.workers.items()
            for replica, handle in enumerate(handles)
        }
        _, silent = ray.wait(list(pings.values()), num_returns=len(pings), timeout=self.timeout_s)
        for key, ref in pings.items():
            if ref not in silent:
                self.result(key, ref)
        for key, ref in pings.items():
            if ref in silent:
                ray.kill(self.workers[key.fragment][key.replica])
                raise WorkerLostError(
                    f"{self.name(key)} answered no liveness check for "
                    f"{self.timeout_s:g} s (stopped, hung or cut off); it was killed"
                )


HEAD_TIMEOUT_MAX_S = 45.0
"""The longest the head may stay silent before the run stops: Ray itself ends a driver whose GCS
stayed unreachable for 60 s (``gcs_rpc_server_reconnect_timeout_s``), with no word on the run."""


def check_head(timeout_s: float) -> None:
    """``HeadLostError`` where the cluster's head (its GCS) accepts no connection for ``timeout_s``
    (at most ``HEAD_TIMEOUT_MAX_S``)."""
    timeout_s = min(timeout_s, HEAD_TIMEOUT_MAX_S)
    head = head_silent_for(timeout_s)
    if head is not None:
        raise HeadLostError(
            f"the cluster's head {head} (Ray's GCS) accepted no connection for {timeout_s:g} s: "
            "it was lost or cut off, and a Ray cluster cannot go on without its head"
        )


def get_each(refs: list[Any]) -> list[Any]:
    """``get`` of every ref, then the first error among them: every replica's result is taken, so
    Ray reports none of the others' errors as unhandled (each replica of a fragment usually fails
    its build the same way)."""
    results, first = [], None
    for ref in refs:
        try:
            results.append(get(ref))
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the others are taken
            first = first or exc
    if first is not None:
        raise first
    return results


def get(refs: Any, who: str = "a fragment worker") -> Any:
    """``ray.get`` that re-raises an msrl error from a worker as itself (one clean line for the CLI),
    and a worker's death (not its constructor failing) as ``WorkerLostError`` naming ``who``."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        return ray.get(refs)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, MsrlError):
            raise cause from None
        raise
    except RayActorError as exc:
        if getattr(exc, "actor_init_failed", False):
            raise
        raise WorkerLostError(f"{who} was lost ({_first_line(exc).rstrip('.')})") from None


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]
