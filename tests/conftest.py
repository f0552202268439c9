"""Shared test set-up: eager learners unless a test asks for compiled ones, hypothesis profiles,
the same global random state at every test's start, and one local Ray per test session for the
tests that can share it."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings

# ``algo.compile: auto`` (the default) means eager in the suite and in the runs it starts: a run then
# repeats bit for bit, whenever a background build would have finished, and the suite starts no
# builds it does not test.  The tests of compiled steps ask for them (``compile=true``, or
# ``MSRL_COMPILE=auto`` in their environment).
os.environ["MSRL_COMPILE"] = "false"

# Property tests draw a fixed, derandomised set of examples unless asked otherwise, so a run on any
# machine sees the same cases; each test lists with @example the cases it must always reach.
# HYPOTHESIS_PROFILE=explore searches further, with fresh random examples each run.
settings.register_profile("ci", max_examples=150, derandomize=True, database=None)
settings.register_profile("explore", max_examples=2000, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _same_global_random_state() -> None:
    """Seed torch's, NumPy's and Python's global generators before every test, so what a test draws
    from them (a network's initial weights, say) does not depend on which tests ran before it in
    its worker: a test sees the same numbers in every run and on every split of the suite."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


# -- one Ray per session ----------------------------------------------------------------------------
TESTS = Path(__file__).resolve().parent

SHARED_RAY_CPUS = 4 * (os.cpu_count() or 1)
"""Logical CPUs of the shared instance: the most msrl's embedded Ray offers on this machine (4 per
core), so that no policy a test runs makes it restart for a larger one."""

SHARED_RAY_MODULES = frozenset(
    {
        "cluster/test_shares.py",
        "e2e/test_algorithm_matrix.py",
        "e2e/test_compare.py",
        "e2e/test_preset_exactness.py",
        "e2e/test_presets.py",
    }
)
"""Test modules (under tests/) whose runs are all on Ray policies and share the session's Ray: each
would otherwise start its own embedded instance, or restart one too small for its policy.  Left out
on purpose: modules whose tests run mostly in-process (``local``), where Ray's daemons would only
take CPU from them (msrl starts its embedded Ray there when a test first needs it, and keeps it);
modules that build their own cluster shape (``ray.cluster_utils.Cluster``: tests/cluster's placement,
custom-resource and join tests), check how the embedded instance itself starts
(test_embedded_loopback, test_connect, test_embedded_limits), or kill workers (tests/chaos).  Those
shut down whatever Ray is running first; the next test that shares one starts it again."""


class SharedRay:
    """The session's local Ray: started (bound to loopback, through ``cluster.connect``) by the
    first test that asks for it, started again only if a test in between shut it down, and shut
    down when the session ends if it is the one this session started.  With pytest-xdist a session
    is one worker process, so each worker has its own."""

    def __init__(self) -> None:
        self.starts = 0
        self.uses = 0
        self._session: str | None = None

    def ensure(self) -> None:
        import ray

        import cluster

        self.uses += 1
        if ray.is_initialized():  # ours, or an embedded one an earlier run left: either is shared
            return
        cluster.connect(None, num_cpus=SHARED_RAY_CPUS)
        self.starts += 1
        self._session = ray.get_runtime_context().get_session_name()

    def close(self) -> None:
        import ray

        if self._session is not None and ray.is_initialized():
            if ray.get_runtime_context().get_session_name() == self._session:
                ray.shutdown()


@pytest.fixture(scope="session")
def ray_session() -> Iterator[SharedRay]:
    """Book-keeping of the session's shared Ray (see ``shared_ray``)."""
    shared = SharedRay()
    yield shared
    shared.close()


@pytest.fixture
def shared_ray(ray_session: SharedRay) -> SharedRay:
    """A local Ray on loopback, running when the test starts, shared with the other tests of the
    session that use it; msrl runs on Ray policies join it instead of starting their own."""
    pytest.importorskip("ray")
    ray_session.ensure()
    return ray_session


@pytest.fixture(autouse=True)
def _share_ray_in_listed_modules(request: pytest.FixtureRequest) -> None:
    """Give every test of ``SHARED_RAY_MODULES`` the shared Ray, without a line in each module."""
    path = Path(str(request.node.path)).resolve()
    if path.is_relative_to(TESTS) and path.relative_to(TESTS).as_posix() in SHARED_RAY_MODULES:
        request.getfixturevalue("shared_ray")
