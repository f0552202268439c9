"""A fragment worker's compute thread returns each numbered job (an iteration) to the call that
asked for it, even when the calls reach it out of order: a race that would make a resume
inexact.  The order is forced, not hoped for: the compute thread is held busy while the two calls
queue, and the test waits until each has queued before the next one starts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

pytest.importorskip("ray")

from cluster import ComputeThread  # noqa: E402


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_calls_arriving_out_of_order_get_their_own_iteration() -> None:
    compute = ComputeThread("test-compute")
    runs = iter(range(100))
    iterate = lambda: f"iteration {next(runs)}"  # noqa: E731 - what each numbered job computes
    busy, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=compute.run, args=(lambda: busy.set() or release.wait(),))
    holder.start()
    busy.wait(5)
    results: dict[int, str] = {}
    # The call for iteration 1 queues its job first, the call for iteration 0 second.
    late = threading.Thread(target=lambda: results.__setitem__(1, compute.run_numbered(1, iterate)))
    late.start()
    _wait_for(lambda: compute.jobs.qsize() == 1, "the first call to queue")
    early = threading.Thread(target=lambda: results.__setitem__(0, compute.run_numbered(0, iterate)))
    early.start()
    _wait_for(lambda: compute.jobs.qsize() == 2, "the second call to queue")
    release.set()
    for thread in (holder, late, early):
        thread.join(timeout=5)
    # The first job queued computed iteration 0, yet went to the call that asked for it.
    assert results == {0: "iteration 0", 1: "iteration 1"}
    compute.close()


def test_an_iteration_that_fails_raises_in_its_own_call() -> None:
    compute = ComputeThread("test-compute")

    def boom() -> str:
        raise RuntimeError("env returned NaN")

    with pytest.raises(RuntimeError, match="NaN"):
        compute.run_numbered(0, boom)
    assert compute.run_numbered(1, lambda: "next") == "next"  # the thread lives on
    compute.close()
