"""Shared test set-up: hypothesis profiles."""

from __future__ import annotations

import os

from hypothesis import settings

# Property tests draw a fixed, derandomised set of examples unless asked otherwise, so a run on any
# machine sees the same cases; each test lists with @example the cases it must always reach.
# HYPOTHESIS_PROFILE=explore searches further, with fresh random examples each run.
settings.register_profile("ci", max_examples=150, derandomize=True, database=None)
settings.register_profile("explore", max_examples=2000, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
