"""A compiled region's build writes its output to a log, the place a failed build's reason is read
from (and the one output of a build that a user may see): a real build of a small region leaves no
warning there, torch's own deprecation of the pytree specs it copies included.  One real build
(inductor and the C++ compiler: about 20 s of one core)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from msrl.rl import CompiledRegion

BUILD_TIMEOUT_S = 300


def _step(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    return torch.tanh(x @ w), [x.sum()]  # nested outputs: pytree specs with leaves


@pytest.mark.landing  # an AOTInductor build from an empty cache: 20 s, beside the landing tier's other builds
def test_a_build_leaves_no_warning_in_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MSRL_COMPILE", "auto")
    x, w = torch.randn(8, 3), torch.randn(3, 2)
    region = CompiledRegion(_step, "auto", name="probe")
    region.start(x, w)
    build = region.build
    assert build is not None
    started = time.monotonic()
    with open(build.log, encoding="utf-8", errors="replace") as log:  # still readable once the build removes it
        while not build.done():
            assert time.monotonic() - started < BUILD_TIMEOUT_S, "the build did not finish"
            time.sleep(0.5)
        written = log.read()
    assert build.error() is None, written
    assert "Warning" not in written, written
