"""Every value an algorithm's components hand on is flat under the cut-edge rule
(``fragments.FLAT_RULE``), whichever of them a distribution policy puts on a cut: weights carrying
observation statistics, MAPPO's grouped batches, actions per agent group, metrics."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from algorithms.a2c import A2C, A2CConfig
from algorithms.dqn import DQN, DQNConfig
from algorithms.impala import IMPALA, IMPALAConfig
from algorithms.mappo import IPPO, MAPPO, IPPOConfig, MAPPOConfig
from algorithms.ppo import PPO, PPOConfig
from algorithms.sac import SAC, SACConfig
from fragments import flat_violation
from msrl.core import Deferred, RunInfo

CASES = {
    "ppo-normalised": (
        PPO,
        PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=8, normalize_obs=True, normalize_reward=True),
    ),
    "a2c": (A2C, A2CConfig(num_envs=2)),
    "impala": (IMPALA, IMPALAConfig(num_envs=2, num_steps=4)),
    "dqn": (DQN, DQNConfig(num_envs=2, train_frequency=4, gradient_steps=2, batch_size=4, learning_starts=4)),
    "sac": (SAC, SACConfig(num_envs=2, train_frequency=2, gradient_steps=2, batch_size=4, learning_starts=2)),
    "mappo": (MAPPO, MAPPOConfig(num_envs=2, num_steps=4)),
    "ippo-two-policies": (
        IPPO,
        IPPOConfig(
            env_id="Tag-v0",
            env_kwargs={"num_taggers": 1, "num_runners": 2},
            num_envs=2,
            num_steps=4,
            policies={"taggers": "tagger", "runners": "runner"},
        ),
    ),
}


def _outputs(component: Any, method: str, value: Any) -> tuple:
    """The separate values a traced call gives: a tuple-annotated method's elements, else the value."""
    hints = typing.get_type_hints(getattr(type(component), method))
    return value if typing.get_origin(hints.get("return")) is tuple else (value,)


@pytest.mark.parametrize("case", list(CASES))
def test_every_component_output_is_flat(case: str) -> None:
    cls, config = CASES[case]
    algo = cls(config, RunInfo(seed=0, total_env_steps=1000))
    seen: dict[str, str | None] = {}
    for name, component in algo.components().items():
        for method in ("observe", "step", "act", "value", "insert", "drain", "drain_trajectories", "sample"):
            if hasattr(component, method):
                _record(component, f"{name}.{method}", method, seen)
        for method in ("learn", "get_weights"):
            if hasattr(component, method):
                _record(component, f"{name}.{method}", method, seen)
    for _ in range(3):
        algo.train_step()
    assert "learner.get_weights" in seen and "buffer.insert" in seen  # the calls were seen
    assert {call: path for call, path in seen.items() if path is not None} == {}


def _record(component: Any, call: str, method: str, seen: dict[str, str | None]) -> None:
    original = getattr(component, method)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        value = result.resolve() if isinstance(result, Deferred) else result
        if value is not None:
            paths = [flat_violation(part) for part in _outputs(component, method, value)]
            seen[call] = seen.get(call) or next((p for p in paths if p is not None), None)
        else:
            seen.setdefault(call, None)
        return value

    object.__setattr__(component, method, recorded)
