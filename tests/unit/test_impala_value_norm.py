"""IMPALA's ``value_norm``: the critic learns V-trace targets standardised by ``msrl.rl.ValueNorm``.
The statistics are the moments of the targets V-trace computes from the critic's outputs mapped
back to return units; they travel in checkpoints; the compiled step, which would bake them in, is
refused with them."""

from __future__ import annotations

import pytest
import torch

from algorithms.impala import IMPALAConfig, IMPALALearner
from msrl.core import ConfigError, Discrete, RunInfo
from msrl.rl import TrajectoryBatch, vtrace

ENVS, STEPS = 4, 6


def _learner(value_norm: bool = True) -> IMPALALearner:
    config = IMPALAConfig(num_envs=ENVS, num_steps=STEPS, num_minibatches=1, value_norm=value_norm, compile=False)
    return IMPALALearner(4, Discrete(2), config, RunInfo(seed=2, total_env_steps=1000))


def _batch() -> TrajectoryBatch:
    g = torch.Generator().manual_seed(0)
    return TrajectoryBatch(
        torch.randn(ENVS, STEPS, 4, generator=g),
        torch.randint(2, (ENVS, STEPS), generator=g),
        -torch.rand(ENVS, STEPS, generator=g) - 0.2,
        10.0 + 5.0 * torch.rand(ENVS, STEPS, generator=g),  # returns far from the critic's start
        (torch.rand(ENVS, STEPS, generator=g) < 0.2).float(),
        torch.zeros(ENVS, STEPS),
        torch.randn(ENVS, 4, generator=g),
    )


def _targets(learner: IMPALALearner, batch: TrajectoryBatch) -> torch.Tensor:
    """V-trace targets written out: the critic's outputs mapped back by the statistics before any
    batch (mean 0, variance at its floor 0.01), the policy's log-probabilities as the learner has them."""
    cfg, net = learner.config, learner.net
    with torch.no_grad():
        dist, outputs = net(batch.obs.reshape(ENVS * STEPS, -1))
        logprobs = net.head.log_prob(dist, batch.actions.reshape(-1))
        last = net.value(batch.last_obs) * 0.1
    t = lambda x: x.reshape(ENVS, STEPS).t()  # noqa: E731
    vs, _ = vtrace(
        t(batch.logprobs), t(logprobs), t(batch.rewards), t(outputs) * 0.1, t(batch.terminated), t(batch.truncated),
        last, cfg.gamma, cfg.rho_bar, cfg.c_bar,
    )  # fmt: skip
    return vs


def test_the_statistics_are_the_moments_of_the_vtrace_targets() -> None:
    learner, batch = _learner(), _batch()
    targets = _targets(learner, batch)
    assert learner.value_norm is not None
    learner.learn(batch)
    mean, var = learner.value_norm.mean_var()
    assert float(mean) == pytest.approx(float(targets.double().mean()), rel=1e-5)
    assert float(var) == pytest.approx(float(targets.double().var(unbiased=False)), rel=1e-4)
    assert float(mean) > 10.0  # the rewards' scale, which the plain critic would have to reach by its weights


def test_the_value_loss_is_on_standardised_targets() -> None:
    """The first update's value loss: about half the targets' variance in return units (over 100
    here) without normalisation, about half of one standardised."""
    batch = _batch()
    plain, normed = _learner(value_norm=False).learn(batch), _learner().learn(batch)
    assert plain["value_loss"] > 50.0
    assert 0.1 < normed["value_loss"] < 5.0


def test_checkpoints_carry_the_statistics() -> None:
    learner = _learner()
    learner.learn(_batch())
    restored = _learner()
    restored.load_state_dict(learner.state_dict())
    assert restored.value_norm is not None and learner.value_norm is not None
    for a, b in zip(learner.value_norm.mean_var(), restored.value_norm.mean_var()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert "value_norm" not in _learner(value_norm=False).state_dict()


@pytest.mark.parametrize("compile", [True, "true"])
def test_value_norm_refuses_the_compiled_step(compile: bool | str) -> None:
    with pytest.raises(ConfigError, match="algo.value_norm runs the learner eagerly"):
        IMPALAConfig(value_norm=True, compile=compile).validate()
    IMPALAConfig(value_norm=True, compile="auto").validate()
