"""A fragment worker returns each queued iteration to the call that asked for it, even when the
calls reach its threads out of order (the race behind a resume that was not exact)."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ray")

from cluster._worker import ComputeThread, FragmentWorker  # noqa: E402


def _bare_worker() -> FragmentWorker:
    worker = FragmentWorker.__new__(FragmentWorker)  # no Ray, no algorithm: only the iteration bookkeeping
    worker.compute = ComputeThread("test-compute")
    worker.iterations_run = 0
    worker.finished = {}
    worker.finished_cond = threading.Condition()
    runs = iter(range(100))
    worker._iterate = lambda: f"iteration {next(runs)}"
    return worker


def test_calls_arriving_out_of_order_get_their_own_iteration() -> None:
    worker = _bare_worker()
    results: dict[int, str] = {}
    # Iteration 1's call is queued on the compute thread first, iteration 0's second.
    late = threading.Thread(target=lambda: results.__setitem__(1, worker.run_iteration(1)))
    late.start()
    time.sleep(0.05)
    results[0] = worker.run_iteration(0)
    late.join(timeout=5)
    assert results == {0: "iteration 0", 1: "iteration 1"}
    worker.compute.close()


def test_an_iteration_that_fails_raises_in_its_own_call() -> None:
    worker = _bare_worker()

    def boom() -> str:
        raise RuntimeError("env returned NaN")

    worker._iterate = boom
    with pytest.raises(RuntimeError, match="NaN"):
        worker.run_iteration(0)
    worker.compute.close()
