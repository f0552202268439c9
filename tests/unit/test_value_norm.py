"""``msrl.rl.ValueNorm`` (the MAPPO paper's value normalisation) against the formula written out
in NumPy: debiased exponential moving averages of the targets' mean and mean square."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from msrl.rl import ValueNorm, copy_weights


def reference(batches: list[np.ndarray], beta: float, eps: float = 1e-5, floor: float = 1e-2) -> tuple[float, float]:
    """Mean and variance after folding ``batches`` in, one batch at a time, in float64."""
    m = m2 = d = 0.0
    for x in batches:
        m = beta * m + (1 - beta) * x.mean()
        m2 = beta * m2 + (1 - beta) * np.square(x).mean()
        d = beta * d + (1 - beta)
    mean = m / max(d, eps)
    return mean, max(m2 / max(d, eps) - mean**2, floor)


@pytest.mark.parametrize("beta", [0.99999, 0.9, 0.5])
def test_statistics_match_numpy_over_several_batches(beta: float) -> None:
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc, scale, size) for loc, scale, size in [(-20, 4, 300), (-5, 1, 50), (3, 9, 700)]]
    norm = ValueNorm(beta=beta)
    for x in batches:
        norm.update(torch.as_tensor(x, dtype=torch.float32))
    mean, var = norm.mean_var()
    ref_mean, ref_var = reference([x.astype(np.float32).astype(np.float64) for x in batches], beta)
    assert mean.item() == pytest.approx(ref_mean, rel=1e-9, abs=1e-9)
    assert var.item() == pytest.approx(ref_var, rel=1e-9)


def test_the_first_batch_is_not_shrunk_towards_zero() -> None:
    """Bias correction: with beta 0.99999 the raw moving average after one batch is 1e-5 of the
    batch mean; debiased it is the batch's own mean and variance."""
    x = torch.tensor([-30.0, -10.0, -20.0, -40.0], dtype=torch.float64)
    norm = ValueNorm()
    norm.update(x)
    mean, var = norm.mean_var()
    assert norm.running_mean.item() == pytest.approx(-25.0 * 1e-5)
    assert mean.item() == pytest.approx(-25.0)
    assert var.item() == pytest.approx(x.var(unbiased=False).item())
    assert norm.normalize(x).mean().item() == pytest.approx(0.0, abs=1e-9)
    assert norm.normalize(x).std(unbiased=False).item() == pytest.approx(1.0)


def test_normalize_and_denormalize_round_trip() -> None:
    norm = ValueNorm(beta=0.99)
    norm.update(torch.linspace(-50.0, 10.0, 101))
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(1)) * 20
    assert torch.allclose(norm.denormalize(norm.normalize(x)), x, atol=1e-5)
    assert torch.allclose(norm.normalize(norm.denormalize(x)), x, atol=1e-5)
    assert norm.normalize(x).dtype == torch.float32


def test_before_any_update_the_variance_is_the_floor() -> None:
    norm = ValueNorm()
    mean, var = norm.mean_var()
    assert (mean.item(), var.item()) == (0.0, pytest.approx(1e-2))
    assert norm.denormalize(torch.tensor([2.0])).item() == pytest.approx(0.2)


def test_masked_samples_do_not_count_and_an_empty_batch_changes_nothing() -> None:
    x = torch.tensor([[1.0, 100.0], [3.0, -100.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    norm = ValueNorm(beta=0.9)
    norm.update(x, mask)
    assert norm.mean_var()[0].item() == pytest.approx(2.0)
    before = copy_weights(norm)
    norm.update(x, torch.zeros_like(mask))
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())


def test_sums_averaged_over_copies_give_the_whole_batch() -> None:
    """Learner copies average ``batch_sums`` (``Learner.sync_mean``): the statistics then equal
    those of one learner that saw the whole batch, whatever each copy's share of active samples."""
    whole = torch.arange(12.0).reshape(6, 2) - 4
    mask = torch.tensor([[1, 1], [1, 0], [0, 0], [1, 1], [1, 1], [0, 1]], dtype=torch.float32)
    one, copies = ValueNorm(beta=0.9), [ValueNorm(beta=0.9), ValueNorm(beta=0.9)]
    one.update(whole, mask)
    sums = [c.batch_sums(whole[i * 3 : (i + 1) * 3], mask[i * 3 : (i + 1) * 3]) for i, c in enumerate(copies)]
    average = (sums[0] + sums[1]) / 2
    for c in copies:
        c.update_from_sums(average)
        assert torch.allclose(torch.stack(c.mean_var()), torch.stack(one.mean_var()))


def test_statistics_are_buffers_in_the_state_dict_not_parameters() -> None:
    norm = ValueNorm()
    norm.update(torch.tensor([5.0, 7.0]))
    assert list(norm.parameters()) == []
    restored = ValueNorm()
    restored.load_state_dict(copy_weights(norm))
    assert torch.equal(torch.stack(restored.mean_var()), torch.stack(norm.mean_var()))


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="beta"):
        ValueNorm(beta=1.0)
    with pytest.raises(ValueError, match="var_floor"):
        ValueNorm(var_floor=0.0)
