"""Learner steps built ahead of time read the modules their losses only read (DQN's target
network; SAC's target critics, its policy in the critics' target and its critics in the policy's
loss) at every call: a target network updated after the step was built changes the next update
exactly as it changes the eager one.  A library that baked those weights in as constants would
keep learning against the first target.

Each test builds its steps with inductor and a C++ compiler (20-60 s cold on two cores): -m slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_compiled_learner import _algorithm, _assert_same_state, _batches, _resolved, _steps

from msrl.rl import polyak_update_

pytestmark = pytest.mark.slow


def _shift(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # built here, not loaded


@pytest.mark.parametrize("case", ["dqn-double", "sac"])
def test_a_built_step_reads_the_target_networks_at_every_call(case: str, tmp_path: Path) -> None:
    batches = _batches(_algorithm(case, compile=False), iterations=4)
    eager, built = _algorithm(case, compile=False), _algorithm(case, compile=True)
    half = len(batches) // 2
    for batch in batches[:half]:
        assert _resolved(built.learner.learn(batch)) == pytest.approx(_resolved(eager.learner.learn(batch)), rel=1e-4)
    assert all(step.compiled for step in _steps(built.learner) if step.regions["step"].started)
    assert list((tmp_path / "cache").rglob("*.pt2")), "nothing was built"
    for learner in (eager.learner, built.learner):  # targets far from the online networks, as after many updates
        if case == "sac":
            _shift(learner.critic_target, seed=5)  # read by the critics' target only
            polyak_update_(learner.critic, learner.critic_target, 0.5)  # and the critics the policy's loss reads
        else:
            _shift(learner.q_target, seed=5)
    for batch in batches[half:]:
        assert _resolved(built.learner.learn(batch)) == pytest.approx(_resolved(eager.learner.learn(batch)), rel=1e-4)
    _assert_same_state(built.learner.state_dict(), eager.learner.state_dict())
