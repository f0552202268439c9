"""No learner waits on its device inside its update: metrics add up on the device and reach the host
once per ``learn`` (one ``tolist``), whatever the number of gradient steps or minibatches.  On a
GPU each ``.item()``/``float(tensor)`` is a device sync; on the CPU the test counts the calls that
would be one, made from the algorithms' and ``msrl.rl``'s code."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from algorithms.a2c import A2C, A2CConfig
from algorithms.dqn import DQN, DQNConfig
from algorithms.impala import IMPALA, IMPALAConfig
from algorithms.mappo import MAPPO, MAPPOConfig
from algorithms.ppo import PPO, PPOConfig
from algorithms.sac import SAC, SACConfig
from msrl.core import Deferred, RunInfo

REPO = Path(__file__).resolve().parents[2]
OURS = (str(REPO / "algorithms"), str(REPO / "msrl" / "rl"))
SYNCS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")


@contextmanager
def _counting_syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every host-sync call on a tensor made directly from our code, by the calling line."""
    calls: list[str] = []
    for name in SYNCS:
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            caller = sys._getframe(1).f_code
            if caller.co_filename.startswith(OURS):
                calls.append(f"{_name} in {Path(caller.co_filename).name}:{caller.co_name}")
            return _original(self, *args, **kw)

        monkeypatch.setattr(torch.Tensor, name, counted)
    try:
        yield calls
    finally:
        monkeypatch.undo()


CASES = {
    "ppo": (PPO, PPOConfig(num_envs=4, num_steps=16, update_epochs=3, num_minibatches=4)),
    "a2c": (A2C, A2CConfig(num_envs=4)),
    "impala": (IMPALA, IMPALAConfig(num_envs=4, num_steps=8, update_epochs=3, num_minibatches=2)),
    "dqn": (DQN, DQNConfig(num_envs=4, train_frequency=4, gradient_steps=6, batch_size=8, learning_starts=16)),
    "sac": (SAC, SACConfig(num_envs=2, train_frequency=4, gradient_steps=6, batch_size=8, learning_starts=8)),
    "mappo": (MAPPO, MAPPOConfig(num_envs=2, num_steps=8, update_epochs=3, num_minibatches=2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_learner_syncs_once_per_learn(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cls, config = CASES[case]
    algo = cls(config, RunInfo(seed=0, total_env_steps=10_000))
    learn = algo.learner.learn
    per_learn: list[list[str]] = []

    def counted_learn(batch: Any) -> Any:
        with _counting_syncs(monkeypatch) as calls:
            metrics = learn(batch)
            if isinstance(metrics, Deferred):  # deferred diagnostics are part of the learn's reduction
                metrics = metrics.resolve()
        per_learn.append(calls)
        return metrics

    algo.learner.learn = counted_learn  # type: ignore[method-assign]
    metrics = [algo.train_step() for _ in range(3)]
    assert metrics[-1], "the last iteration learned"  # past any warm-up: metrics were reported
    learned = [calls for calls, m in zip(per_learn, metrics) if m]
    assert all(len(calls) == 1 and calls[0].startswith("tolist") for calls in learned), learned
    assert all(calls == [] for calls, m in zip(per_learn, metrics) if not m)  # a warm-up learn syncs nothing
