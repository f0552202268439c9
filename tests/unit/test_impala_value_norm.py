"""IMPALA's ``value_norm``: the critic learns V-trace targets standardised by ``msrl.rl.ValueNorm``.
The statistics are the moments of the targets V-trace computes from the critic's outputs mapped
back to return units; they travel in checkpoints; the compiled step, which would bake them in, is
refused with them.  ``clip_coef``: APPO's clipped surrogate in place of the V-trace policy
gradient.  ``loss_sum``: the loss summed over a minibatch's steps, which the paper's RMSProp
epsilon is sized for."""

from __future__ import annotations

import pytest
import torch

from algorithms.impala import IMPALAConfig, IMPALALearner
from msrl.core import ConfigError, Discrete, RunInfo
from msrl.rl import TrajectoryBatch, vtrace

ENVS, STEPS = 4, 6


def _learner(value_norm: bool = True, clip_coef: float | None = None, **options: object) -> IMPALALearner:
    config = IMPALAConfig(
        num_envs=ENVS,
        num_steps=STEPS,
        num_minibatches=1,
        value_norm=value_norm,
        clip_coef=clip_coef,
        compile=False,
        **options,  # type: ignore[arg-type]
    )
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


def _vtrace(learner: IMPALALearner, batch: TrajectoryBatch, scale: float = 0.1) -> tuple[torch.Tensor, ...]:
    """V-trace targets and advantages written out, with the critic's outputs times ``scale`` (0.1:
    mapped back by value_norm's statistics before any batch, mean 0 and variance at its floor
    0.01), and the policy's log-probabilities (time-major) as the learner has them."""
    cfg, net = learner.config, learner.net
    with torch.no_grad():
        dist, outputs = net(batch.obs.reshape(ENVS * STEPS, -1))
        logprobs = net.head.log_prob(dist, batch.actions.reshape(-1))
        last = net.value(batch.last_obs) * scale
    t = lambda x: x.reshape(ENVS, STEPS).t()  # noqa: E731
    vs, advantages = vtrace(
        t(batch.logprobs), t(logprobs), t(batch.rewards), t(outputs) * scale, t(batch.terminated), t(batch.truncated),
        last, cfg.gamma, cfg.rho_bar, cfg.c_bar,
    )  # fmt: skip
    return vs, advantages, t(logprobs)


def _targets(learner: IMPALALearner, batch: TrajectoryBatch) -> torch.Tensor:
    return _vtrace(learner, batch)[0]


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


def _policy_grads(learner: IMPALALearner, batch: TrajectoryBatch) -> list[torch.Tensor]:
    learner.net.zero_grad()
    learner.losses(batch)["policy_loss"].backward()
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in learner.net.parameters()]


def test_the_clipped_surrogate_is_the_vtrace_gradient_on_policy() -> None:
    """Where the behaviour policy is the learner's (ratio 1), APPO's surrogate and the V-trace
    policy gradient have the same gradient."""
    plain, clipped = _learner(value_norm=False), _learner(value_norm=False, clip_coef=0.2)
    _, _, logprobs = _vtrace(plain, _batch(), scale=1.0)
    batch = _batch()._replace(logprobs=logprobs.t().contiguous())
    for a, b in zip(_policy_grads(plain, batch), _policy_grads(clipped, batch)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_off_policy_the_surrogate_clips_the_ratio_to_the_behaviour_policy() -> None:
    learner, batch = _learner(value_norm=False, clip_coef=0.2), _batch()
    _, advantages, logprobs = _vtrace(learner, batch, scale=1.0)
    ratio = (logprobs - batch.logprobs.t()).exp()
    assert ((ratio < 0.8) | (ratio > 1.2)).any()  # the batch reaches both sides of the clip
    unweighted = advantages / ratio.clamp(max=1.0)
    expected = torch.max(-unweighted * ratio, -unweighted * ratio.clamp(0.8, 1.2)).mean()
    assert learner.losses(batch)["policy_loss"].item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("clip_coef", [0.0, 1.0, -0.1])
def test_clip_coef_outside_the_unit_interval_is_refused(clip_coef: float) -> None:
    with pytest.raises(ConfigError, match=r"algo.clip_coef must be in \(0, 1\) or null"):
        IMPALAConfig(clip_coef=clip_coef).validate()


def test_loss_sum_is_the_mean_loss_times_the_steps() -> None:
    batch = _batch()
    mean_learner, sum_learner = _learner(value_norm=False), _learner(value_norm=False, loss_sum=True)
    mean_loss, mean_terms = mean_learner.loss(*batch)
    sum_loss, sum_terms = sum_learner.loss(*batch)
    assert float(sum_loss) == pytest.approx(ENVS * STEPS * float(mean_loss), rel=1e-5)
    torch.testing.assert_close(sum_terms, mean_terms)  # the reported terms stay means


def test_rmsprop_at_the_papers_epsilon_moves_summed_losses_further() -> None:
    """RMSProp with epsilon 0.01 divides each gradient by about ``0.1 |g| + 0.01`` on its first
    step: with sparse rewards of one point (Pong's), the mean's gradients are small beside the
    epsilon and the step is a fraction of the learning rate; the sum's step is several times larger."""
    rewards = torch.zeros(ENVS, STEPS)
    rewards[0, 3], rewards[2, 5] = 1.0, -1.0
    batch = _batch()._replace(rewards=rewards)

    def moved(loss_sum: bool) -> float:
        learner = _learner(value_norm=False, optimizer="rmsprop", anneal_lr=False, ent_coef=0.0, loss_sum=loss_sum)
        before = torch.cat([p.detach().flatten().clone() for p in learner.net.parameters()])
        learner.learn(batch)
        after = torch.cat([p.detach().flatten() for p in learner.net.parameters()])
        return float((after - before).norm())

    assert moved(True) > 3.0 * moved(False)
