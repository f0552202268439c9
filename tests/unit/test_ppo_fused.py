"""The fused PPO path (TwinMLP, closed-form loss gradients) is an option equivalent to the plain
autograd path a researcher reads: same initial network for a seed, same update."""

from __future__ import annotations

import pytest
import torch

from algorithms.ppo import FusedPPOLearner, PPOConfig, PPOLearner
from msrl.core import Discrete, RunInfo
from msrl.rl import RolloutBatch


def _batch(n: int, obs_dim: int, actions: int, seed: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    return RolloutBatch(
        torch.randn(n, obs_dim, generator=g),
        torch.randint(actions, (n,), generator=g),
        -torch.rand(n, generator=g) - 0.2,
        torch.randn(n, generator=g),
        torch.randn(n, generator=g),
        torch.randn(n, generator=g),
    )


@pytest.mark.parametrize("clip_vloss", [False, True])
def test_fused_and_plain_learners_make_the_same_update(clip_vloss: bool) -> None:
    config = PPOConfig(
        num_envs=16, num_steps=16, update_epochs=2, num_minibatches=4, clip_vloss=clip_vloss, ent_coef=0.01
    )
    run = RunInfo(seed=5, total_env_steps=10 * config.batch_size)  # 10 updates for the learning-rate schedule
    plain = PPOLearner(4, Discrete(3), config, run)
    fused = FusedPPOLearner(4, Discrete(3), config, run)
    probe = torch.randn(64, 4)
    with torch.no_grad():
        for a, b in zip(plain.net(probe), fused.net(probe)):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        before = plain.net(probe)[0].clone()
    batch = _batch(config.num_envs * config.num_steps, 4, 3, seed=1)
    plain.learn(batch)
    fused.learn(batch)
    with torch.no_grad():
        after_plain, after_fused = plain.net(probe), fused.net(probe)
    assert (after_plain[0] - before).abs().max() > 1e-3  # the update moved the policy
    for a, b in zip(after_plain, after_fused):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)
