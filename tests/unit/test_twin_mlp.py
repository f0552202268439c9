"""TwinMLP computes what two nn.Sequential tanh towers compute, with the gradients autograd would
give them; clip_grad_norm_ follows torch's rule."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from msrl.rl import TwinMLP, clip_grad_norm_

INPUTS, OUTPUTS, HIDDEN = 4, 3, 16


def _orthogonal_linear(in_features: int, out_features: int, gain: float, generator: torch.Generator) -> nn.Linear:
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain, generator=generator)
    nn.init.zeros_(layer.bias)
    return layer


def _reference(seed: int) -> tuple[nn.Sequential, nn.Sequential]:
    """The two towers TwinMLP replaces, initialised in the order it documents (value first)."""
    g = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as TwinMLP does while it draws: orthogonal_'s QR rounds by thread count
    try:
        return _towers(g)
    finally:
        torch.set_num_threads(threads)


def _towers(g: torch.Generator) -> tuple[nn.Sequential, nn.Sequential]:
    value = nn.Sequential(
        _orthogonal_linear(INPUTS, HIDDEN, 2**0.5, g),
        nn.Tanh(),
        _orthogonal_linear(HIDDEN, HIDDEN, 2**0.5, g),
        nn.Tanh(),
        _orthogonal_linear(HIDDEN, 1, 1.0, g),
    )
    policy = nn.Sequential(
        _orthogonal_linear(INPUTS, HIDDEN, 2**0.5, g),
        nn.Tanh(),
        _orthogonal_linear(HIDDEN, HIDDEN, 2**0.5, g),
        nn.Tanh(),
        _orthogonal_linear(HIDDEN, OUTPUTS, 0.01, g),
    )
    return policy, value


def _twin(seed: int) -> TwinMLP:
    return TwinMLP(INPUTS, OUTPUTS, HIDDEN, torch.Generator().manual_seed(seed))


def _randomise_biases(net: TwinMLP, policy: nn.Sequential, value: nn.Sequential) -> None:
    """Zero biases would hide a bias gradient or offset bug; give both networks the same random ones."""
    _, b1, _, b2, _, bp, _, bv = net.layout.split(net.params.data)
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for tower, index in ((policy, 0), (value, 1)):
            tower[0].bias.copy_(torch.randn(HIDDEN, generator=g))
            tower[2].bias.copy_(torch.randn(HIDDEN, generator=g))
            b1[index * HIDDEN : (index + 1) * HIDDEN] = tower[0].bias
            b2[index, 0] = tower[2].bias
        policy[4].bias.copy_(torch.randn(OUTPUTS, generator=g))
        value[4].bias.copy_(torch.randn(1, generator=g))
        bp.copy_(policy[4].bias)
        bv.copy_(value[4].bias)


def test_initial_weights_are_those_of_the_two_towers() -> None:
    net = _twin(seed=5)
    policy, value = _reference(seed=5)
    w1, b1, w2, b2, wp, bp, wv, bv = net.layout.split(net.params.data)
    assert torch.equal(w1[:, :HIDDEN], policy[0].weight.t()) and torch.equal(w1[:, HIDDEN:], value[0].weight.t())
    assert torch.equal(w2[0], policy[2].weight.t()) and torch.equal(w2[1], value[2].weight.t())
    assert torch.equal(wp, policy[4].weight.t()) and torch.equal(wv, value[4].weight.t())
    assert not any(b.any() for b in (b1, b2, bp, bv))
    assert not torch.equal(net.params, _twin(seed=6).params)


def test_outputs_and_gradients_match_autograd_through_the_towers() -> None:
    net = _twin(seed=1)
    policy, value = _reference(seed=1)
    _randomise_biases(net, policy, value)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(32, INPUTS, generator=g, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    upstream_logits, upstream_value = torch.randn(32, OUTPUTS, generator=g), torch.randn(32, generator=g)

    logits, values = net(x)
    ref_logits, ref_values = policy(x_ref), value(x_ref).squeeze(-1)
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, ref_values, atol=1e-5, rtol=1e-5)

    ((logits * upstream_logits).sum() + (values * upstream_value).sum()).backward()
    ((ref_logits * upstream_logits).sum() + (ref_values * upstream_value).sum()).backward()
    g_w1, g_b1, g_w2, g_b2, g_wp, g_bp, g_wv, g_bv = net.layout.split(net.params.grad)
    for tower, index in ((policy, 0), (value, 1)):
        torch.testing.assert_close(
            g_w1[:, index * HIDDEN : (index + 1) * HIDDEN], tower[0].weight.grad.t(), atol=1e-5, rtol=1e-4
        )
        torch.testing.assert_close(
            g_b1[index * HIDDEN : (index + 1) * HIDDEN], tower[0].bias.grad, atol=1e-5, rtol=1e-4
        )
        torch.testing.assert_close(g_w2[index], tower[2].weight.grad.t(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(g_b2[index, 0], tower[2].bias.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(g_wp, policy[4].weight.grad.t(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(g_bp, policy[4].bias.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(g_wv, value[4].weight.grad.t(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(g_bv, value[4].bias.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("used", ["logits", "value"])
def test_a_loss_on_one_head_leaves_the_other_towers_gradient_zero(used: str) -> None:
    net = _twin(seed=3)
    logits, values = net(torch.randn(8, INPUTS))
    (logits.sum() if used == "logits" else values.sum()).backward()
    _, _, g_w2, _, g_wp, _, g_wv, _ = net.layout.split(net.params.grad)
    unused_tower = 1 if used == "logits" else 0
    assert not g_w2[unused_tower].any()
    assert not (g_wv if used == "logits" else g_wp).any()
    assert g_w2[1 - unused_tower].any()


def test_gradient_passes_a_float64_gradcheck() -> None:
    net = _twin(seed=4).double()
    x = torch.randn(6, INPUTS, dtype=torch.float64, requires_grad=True)

    def outputs(inp: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        assert params is net.params  # gradcheck perturbs it in place; the net's weight views see it
        logits, values = net(inp)
        return torch.cat([logits.reshape(-1), values])

    assert torch.autograd.gradcheck(outputs, (x, net.params), eps=1e-6, atol=1e-5)


def test_inference_needs_no_autograd_graph() -> None:
    net = _twin(seed=1)
    with torch.inference_mode():
        logits, values = net(torch.randn(4, INPUTS))
    assert logits.grad_fn is None and values.grad_fn is None
    logits, _ = net(torch.randn(4, INPUTS))
    assert logits.grad_fn is not None


@pytest.mark.parametrize("scale", [1e-3, 10.0])
def test_clip_grad_norm_follows_torchs_rule(scale: float) -> None:
    g = torch.Generator().manual_seed(0)
    ours = torch.nn.Parameter(torch.zeros(50))
    theirs = torch.nn.Parameter(torch.zeros(50))
    ours.grad = torch.randn(50, generator=g) * scale
    theirs.grad = ours.grad.clone()
    norm = clip_grad_norm_(ours, 0.5)
    torch_norm = torch.nn.utils.clip_grad_norm_([theirs], 0.5)
    torch.testing.assert_close(norm, torch_norm)
    torch.testing.assert_close(ours.grad, theirs.grad)
    assert torch.linalg.vector_norm(ours.grad) <= 0.5 + 1e-6
