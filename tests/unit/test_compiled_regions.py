"""A compiled region under ``algo.compile: auto``: its owner runs eagerly while a separate process
builds the package (the owner never waits), the region switches only when the run asks between
iterations (``switch_compiled``), and a second region of the same function and shapes finds the
package and is compiled from its first call, where one of other shapes needs a build of its own.
A region its owner names (``key``) is found by that name alone, without a trace.
Two real builds of a small region (inductor and the C++ compiler: about 20 s of one core each)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from msrl.rl import CompiledRegion, compiling, switch_compiled

BUILD_TIMEOUT_S = 300


def _scale(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    return (torch.tanh(x @ w) * 2.0,)


@pytest.mark.landing  # an AOTInductor build from an empty cache: 40 s, beside the landing tier's other builds
def test_a_region_builds_in_the_background_and_switches_between_iterations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MSRL_COMPILE", "auto")  # what a default run does (the suite's keeps defaults eager)
    x, w = torch.randn(8, 3), torch.randn(3, 2)
    region = CompiledRegion(_scale, "auto", name="probe")
    started = time.monotonic()
    region.start(x, w)
    assert time.monotonic() - started < 10, "start traces and hands the build over; it does not wait"
    assert region.building and not region.ready and compiling() == ("probe",)
    while not region.build.done():  # type: ignore[union-attr]
        assert not region.ready, "a finished build waits for the run's next boundary"
        assert time.monotonic() - started < BUILD_TIMEOUT_S, "the build did not finish"
        time.sleep(0.5)
    assert not region.ready  # built, but not switched to: the run has not reached a boundary
    switched = switch_compiled()
    assert [name for name, _ in switched] == ["probe"] and switched[0][1] > 0
    assert region.ready and compiling() == () and switch_compiled() == ()
    torch.testing.assert_close(region(x, w)[0], _scale(x, w)[0])
    packages = list((tmp_path / "cache" / "aoti").glob("*.pt2"))
    assert len(packages) == 1 and not list((tmp_path / "cache" / "aoti").glob("*.log"))  # a built log is removed

    again = CompiledRegion(_scale, "auto", name="probe")
    again.start(x, w)
    assert again.ready and not again.building  # from the cache, at the first call
    other = torch.randn(3, 2)
    torch.testing.assert_close(again(x, other)[0], _scale(x, other)[0])  # inputs, not constants

    named = CompiledRegion(_scale, "auto", name="probe", key="scale-v1", modules=[__name__])
    named.start(x, w)
    assert named.building and not named.ready  # a named region has a package of its own
    named.build.wait()  # type: ignore[union-attr]
    assert switch_compiled() == (("probe", named.build_seconds),) and named.ready
    impostor = CompiledRegion(lambda x, w: (x @ w,), "auto", name="probe", key="scale-v1", modules=[__name__])
    impostor.start(x, w)  # found by its name, with no trace: the name is the owner's promise of what it computes
    assert impostor.ready and not impostor.building
    torch.testing.assert_close(impostor(x, w)[0], _scale(x, w)[0])

    shaped = CompiledRegion(_scale, "auto", name="probe")  # the same function on other shapes: another package
    shaped.start(torch.randn(4, 3), w)
    assert shaped.building and not shaped.ready
    shaped.build.process.kill()  # type: ignore[union-attr]


def test_an_algorithms_regions_are_named_by_its_config_whatever_its_compile_option() -> None:
    """``compile`` says when the compiled form runs, not what it computes: a run under ``true``
    builds the packages the next run under ``auto`` loads.  Any other field names other packages."""
    from algorithms.ppo import PPOConfig
    from msrl.rl import region_key

    assert region_key(PPOConfig(compile=True)) == region_key(PPOConfig(compile="auto"))
    assert region_key(PPOConfig(compile="false")) == region_key(PPOConfig())
    assert region_key(PPOConfig(learning_rate=1e-3)) != region_key(PPOConfig(learning_rate=2e-3))
    assert "learning_rate=0.001" in region_key(PPOConfig(learning_rate=1e-3, compile=True))
