"""msrl.rl's action heads against torch.distributions: the categorical and diagonal Gaussian
heads (log-probability, entropy, seeded sampling) and the tanh-squashed Gaussian of SAC."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical, Normal, TanhTransform, TransformedDistribution

from msrl.rl import (
    CategoricalHead,
    GaussianHead,
    gaussian_entropy,
    gaussian_log_prob,
    sample_tanh_gaussian,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_gaussian_functions_match_torch_normal() -> None:
    """gaussian_log_prob / gaussian_entropy equal Normal(mean, std).log_prob(x).sum(-1) / .entropy().sum(-1)."""
    g = _gen(0)
    mean, log_std, x = (torch.randn(7, 3, generator=g, dtype=torch.float64) for _ in range(3))
    normal = Normal(mean, log_std.exp())
    torch.testing.assert_close(gaussian_log_prob(mean, log_std, x), normal.log_prob(x).sum(-1))
    torch.testing.assert_close(gaussian_entropy(log_std), normal.entropy().sum(-1))


def test_gaussian_head_matches_torch_normal() -> None:
    """GaussianHead's sample/log_prob/entropy/mode agree with Normal(mean, exp(log_std)); log_std is per dimension."""
    head = GaussianHead(5, 3, log_std_init=-0.5, generator=_gen(1))
    with torch.no_grad():
        head.log_std.copy_(torch.tensor([-0.5, 0.2, 0.7]))
    assert head.log_std.shape == (3,)
    features = torch.randn(6, 5, generator=_gen(2))
    mean, log_std = head(features)
    assert mean.shape == log_std.shape == (6, 3)
    torch.testing.assert_close(log_std, head.log_std.expand(6, 3))
    normal = Normal(mean, log_std.exp())
    action, logprob = head.sample((mean, log_std), _gen(3))
    assert action.shape == (6, 3)
    torch.testing.assert_close(logprob, normal.log_prob(action).sum(-1))
    other = torch.randn(6, 3, generator=_gen(4))
    torch.testing.assert_close(head.log_prob((mean, log_std), other), normal.log_prob(other).sum(-1))
    torch.testing.assert_close(head.entropy((mean, log_std)), normal.entropy().sum(-1))
    assert torch.equal(head.mode((mean, log_std)), mean)


def test_gaussian_head_sampling_is_seeded_and_has_the_right_moments() -> None:
    """Same generator seed gives the same actions, another seed others; many draws have mean ~ mu and
    std ~ exp(log_std)."""
    mean = torch.tensor([1.0, -2.0, 0.5]).expand(20000, 3)
    log_std = torch.tensor([-1.0, 0.0, 0.5]).expand(20000, 3)
    a1, _ = GaussianHead.sample((mean, log_std), _gen(7))
    a2, _ = GaussianHead.sample((mean, log_std), _gen(7))
    a3, _ = GaussianHead.sample((mean, log_std), _gen(8))
    assert torch.equal(a1, a2)
    assert not torch.equal(a1, a3)
    std = log_std[0].exp()
    torch.testing.assert_close(a1.mean(0), mean[0], atol=4 * std.max().item() / 20000**0.5, rtol=0)
    torch.testing.assert_close(a1.std(0), std, atol=0.03, rtol=0.02)


def test_categorical_head_matches_torch_categorical() -> None:
    """CategoricalHead's sample/log_prob/entropy/mode agree with Categorical(logits=...)."""
    head = CategoricalHead(5, 4, generator=_gen(0))
    logits = head(torch.randn(8, 5, generator=_gen(1))) * 300
    dist = Categorical(logits=logits)
    action, logprob = head.sample(logits, _gen(2))
    assert action.shape == (8,) and action.dtype == torch.int64
    torch.testing.assert_close(logprob, dist.log_prob(action))
    every = torch.arange(4).unsqueeze(1).expand(4, 8)
    torch.testing.assert_close(head.log_prob(logits.expand(4, 8, 4), every), dist.log_prob(every))
    torch.testing.assert_close(head.entropy(logits), dist.entropy())
    assert torch.equal(head.mode(logits), dist.probs.argmax(-1))


def test_categorical_sample_frequencies_match_softmax() -> None:
    """Empirical frequencies of many categorical samples are close to softmax(logits)."""
    logits = torch.tensor([[0.5, -1.0, 2.0, 0.0], [3.0, 3.0, -2.0, 1.0]])
    n = 20000
    actions, _ = CategoricalHead.sample(logits.repeat(n, 1), _gen(0))
    actions = actions.view(n, 2)
    probs = torch.softmax(logits, -1)
    for row in range(2):
        freq = torch.bincount(actions[:, row], minlength=4).float() / n
        torch.testing.assert_close(freq, probs[row], atol=4 * 0.5 / n**0.5, rtol=0)
    a1, _ = CategoricalHead.sample(logits.repeat(50, 1), _gen(1))
    a2, _ = CategoricalHead.sample(logits.repeat(50, 1), _gen(1))
    assert torch.equal(a1, a2)


@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_tanh_gaussian_matches_transformed_distribution(scale: float) -> None:
    """sample_tanh_gaussian's log prob equals TransformedDistribution(Normal, TanhTransform) at the same pre-tanh u."""
    g = _gen(0)
    mean = torch.randn(64, 3, generator=g) * scale
    log_std = torch.randn(64, 3, generator=g) * 0.5 - 0.5
    action, logprob = sample_tanh_gaussian(mean, log_std, _gen(11))
    u = mean + torch.randn(mean.shape, generator=_gen(11)) * log_std.exp()
    tanh = TanhTransform(cache_size=1)
    y = tanh(u)
    expected = TransformedDistribution(Normal(mean, log_std.exp()), [tanh]).log_prob(y).sum(-1)
    assert torch.equal(action, y)
    assert torch.isfinite(logprob).all()
    torch.testing.assert_close(logprob, expected, atol=1e-4, rtol=1e-5)
    if scale == 1.0:
        assert ((action > -1) & (action < 1)).all()
    else:
        assert (action.abs() <= 1).all()
