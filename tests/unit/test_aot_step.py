"""Learner steps built ahead of time (``algo.compile: true`` on the CPU) read the modules their
losses only read (DQN's target network; SAC's target critics, its policy in the critics' target
and its critics in the policy's loss) at every call: a target network updated after the step was
built changes the next update exactly as it changes the eager one.  A library that baked those
weights in as constants would keep learning against the first target.

Each test builds its steps with inductor and a C++ compiler (20-60 s cold on two cores): -m slow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_compiled_learner import _dqn, _metrics, _replay, _replay_box, _sac

from msrl.rl import polyak_update_

pytestmark = pytest.mark.slow


def _close(got: dict[str, Any], want: dict[str, Any]) -> None:
    got = {k: v for k, v in got.items() if k != "compile_seconds"}
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)


def _shift(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # built here, not loaded


def test_a_built_dqn_step_reads_the_target_network_at_every_call(tmp_path: Path) -> None:
    eager, built = _dqn(compile=False), _dqn(compile=True)
    assert built.compiled is not None
    batch = _replay()
    _close(_metrics(built.learn(batch)), _metrics(eager.learn(batch)))
    assert built.compiled.step.aot is not None, "the step fell back to eager: nothing was built"
    assert list((tmp_path / "cache").rglob("*.pt2"))
    for learner in (eager, built):  # a target far from the online network, as after many updates
        _shift(learner.q_target, seed=5)
    batch = _replay()
    _close(_metrics(built.learn(batch)), _metrics(eager.learn(batch)))
    for a, b in zip(eager.q.parameters(), built.q.parameters()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


def test_built_sac_steps_read_the_critics_and_the_policy_at_every_call() -> None:
    eager, built = _sac(compile=False), _sac(compile=True)
    _close(built.learn(_replay_box()), eager.learn(_replay_box()))
    assert built.compiled is not None and all(step.step.aot is not None for step in built.compiled)
    for learner in (eager, built):
        _shift(learner.critic_target, seed=5)  # read by the critics' target only
        polyak_update_(learner.critic, learner.critic_target, 0.5)  # and the critics the policy's loss reads
    _close(built.learn(_replay_box()), eager.learn(_replay_box()))
    for a, b in zip([*eager.policy_params, *eager.critic_params], [*built.policy_params, *built.critic_params]):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
