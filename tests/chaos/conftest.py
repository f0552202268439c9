"""The undisturbed run both chaos files compare their faulted runs with."""

from __future__ import annotations

import pytest
from test_worker_faults import COMMON, CONFIG

import msrl


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory) -> list[dict]:
    run = msrl.train(CONFIG, [f"runs_dir={tmp_path_factory.mktemp('runs')}", *COMMON])
    assert run.metrics[-1]["restarts"] == 0 and run.metrics[-1]["lost_env_steps"] == 0
    return run.metrics
