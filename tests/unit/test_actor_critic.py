"""The on-policy actor-critic network and actor: shapes and seeding, observation normalisation by
the statistics the learner sends (as flat entries of its weights), and checkpoints that resume the
actor's draws."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from msrl.core import Box, ConfigError, Discrete
from msrl.rl import (
    ActorCritic,
    ActorCriticActor,
    RunningMeanStd,
    copy_weights,
    load_weights,
    obs_stats_weights,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


BOX = Box(low=-2.0, high=2.0, shape=(1,))


@pytest.mark.parametrize("space", [Discrete(2), BOX])
def test_actor_critic_shapes_and_seeding(space) -> None:
    """ActorCritic's forward has the head's shapes; the seed alone determines the parameters."""
    net = ActorCritic(4, space, hidden=16, seed=3)
    params, value = net(torch.randn(5, 4, generator=_gen(0)))
    assert value.shape == (5,)
    if isinstance(space, Discrete):
        assert params.shape == (5, 2)
    else:
        assert params[0].shape == params[1].shape == (5, 1)
    same, other = ActorCritic(4, space, hidden=16, seed=3), ActorCritic(4, space, hidden=16, seed=4)
    pairs = list(zip(net.parameters(), same.parameters(), other.parameters()))
    assert all(torch.equal(p, q) for p, q, _ in pairs)
    assert not all(torch.equal(p, r) for p, _, r in pairs)


@pytest.mark.parametrize("space", [Discrete(3), BOX])
def test_relu_without_orthogonal_init_is_pytorchs_default_linear(space) -> None:
    """``activation="relu", ortho_init=False`` (SB3's MlpPolicy as rl-zoo's MuJoCo entries tune it):
    ReLU hidden layers, and every layer exactly what ``nn.Linear``'s own initialisation draws from
    the same seed, in the same order as the orthogonal network (critic, torso, head)."""
    net = ActorCritic(4, space, hidden=8, seed=5, log_std_init=-2.0, activation="relu", ortho_init=False)
    assert [type(m) for m in net.torso] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear, torch.nn.ReLU]
    assert [type(m) for m in net.critic][1::2] == [torch.nn.ReLU, torch.nn.ReLU]
    torch.manual_seed(5)  # the global generator, drawn from as nn.Linear's constructor draws
    sizes = [(4, 8), (8, 8), (8, 1), (4, 8), (8, 8), (8, 3 if isinstance(space, Discrete) else 1)]
    expected = [torch.nn.Linear(*size) for size in sizes]
    layers = [net.critic[0], net.critic[2], net.critic[4], net.torso[0], net.torso[2], net.head.linear]
    for layer, reference in zip(layers, expected):
        torch.testing.assert_close(layer.weight, reference.weight, rtol=0, atol=0)
        torch.testing.assert_close(layer.bias, reference.bias, rtol=0, atol=0)
    if isinstance(space, Box):
        torch.testing.assert_close(net.head.log_std.detach(), torch.full((1,), -2.0))
    orthogonal = ActorCritic(4, space, hidden=8, seed=5)
    assert isinstance(orthogonal.torso[1], torch.nn.Tanh)
    assert not torch.allclose(orthogonal.torso[0].weight, net.torso[0].weight)
    assert torch.count_nonzero(orthogonal.torso[0].bias) == 0 and torch.count_nonzero(net.torso[0].bias) == 8
    with pytest.raises(ConfigError, match="activation must be one of: tanh, relu; got 'gelu'"):
        ActorCritic(4, space, activation="gelu")


@pytest.mark.parametrize("space", [Discrete(3), BOX])
def test_layer_norm_normalises_each_towers_input_and_hidden_layers(space) -> None:
    """``layer_norm=True`` (the MAPPO paper's MLPBase): a LayerNorm before each tower and after
    each hidden activation, the linear layers drawn as without it; so each output ignores the
    input's per-row offset and scale, which a network without it does not."""
    net = ActorCritic(4, space, hidden=8, seed=5, activation="relu", layer_norm=True)
    plain = ActorCritic(4, space, hidden=8, seed=5, activation="relu")
    kinds = [torch.nn.LayerNorm, torch.nn.Linear, torch.nn.ReLU, torch.nn.LayerNorm, torch.nn.Linear, torch.nn.ReLU]
    assert [type(m) for m in net.torso] == [*kinds, torch.nn.LayerNorm]
    assert [type(m) for m in net.critic] == [*kinds, torch.nn.LayerNorm, torch.nn.Linear]
    assert [m.normalized_shape for m in net.torso if isinstance(m, torch.nn.LayerNorm)] == [(4,), (8,), (8,)]
    linear = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    plain_linear = [m for m in plain.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linear) == len(plain_linear) == 6
    assert all(torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias) for a, b in zip(linear, plain_linear))
    x = torch.randn(16, 4, generator=_gen(2))
    moved = 3.0 * x + torch.randn(16, 1, generator=_gen(3))  # each row scaled and shifted as a whole
    with torch.no_grad():
        for model, invariant in ((net, True), (plain, False)):
            (params, value), (params_moved, value_moved) = model(x), model(moved)
            logits = params if isinstance(space, Discrete) else params[0]
            logits_moved = params_moved if isinstance(space, Discrete) else params_moved[0]
            same = torch.allclose(value, value_moved, atol=1e-4) and torch.allclose(logits, logits_moved, atol=1e-4)
            assert same == invariant


def test_actor_critic_actor_normalizes_with_the_statistics_it_is_sent() -> None:
    """act, value and greedy take raw observations and standardise them by the statistics that came
    with the weights (numpy's mean/var of the data behind them); the actor never updates them."""
    actor = ActorCriticActor(ActorCritic(3, BOX, hidden=16, seed=0), seed=1, normalize_obs=True, obs_shape=(3,))
    rng = np.random.default_rng(0)
    data = rng.normal([1.0, -5.0, 20.0], [0.5, 2.0, 10.0], size=(40, 3))
    stats = RunningMeanStd((3,))
    stats.update(torch.as_tensor(data))
    actor.set_weights({**actor.net.state_dict(), **obs_stats_weights(stats)})
    raw = rng.normal([1.0, -5.0, 20.0], [0.5, 2.0, 10.0], size=(6, 3))
    normalised = torch.as_tensor(
        np.clip((raw - data.mean(0)) / np.sqrt(data.var(0) + 1e-8), -10, 10), dtype=torch.float32
    )
    with torch.no_grad():
        params, value = actor.net(normalised)
    raw_t = torch.as_tensor(raw, dtype=torch.float32)
    torch.testing.assert_close(actor.greedy(raw_t), actor.net.head.mode(params), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(actor.value(raw_t), value, atol=1e-5, rtol=1e-5)
    actor.act(raw_t)
    assert actor.obs_stats.count == len(data)  # acting does not move the statistics


def test_actor_critic_actor_state_dict_round_trip() -> None:
    """An actor reloaded from a state_dict has the same statistics and draws the same next actions."""
    space = Discrete(3)
    a = ActorCriticActor(ActorCritic(3, space, hidden=16, seed=0), seed=1, normalize_obs=True, obs_shape=(3,))
    g = _gen(5)
    stats = RunningMeanStd((3,))
    stats.update(torch.randn(8, 3, generator=g) * 3 + 1)
    a.set_weights({**a.net.state_dict(), **obs_stats_weights(stats)})
    a.act(torch.randn(8, 3, generator=g) * 3 + 1)
    b = ActorCriticActor(ActorCritic(3, space, hidden=16, seed=9), seed=2, normalize_obs=True, obs_shape=(3,))
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert torch.equal(a.obs_stats.mean, b.obs_stats.mean) and torch.equal(a.obs_stats.var, b.obs_stats.var)
    for _ in range(3):
        obs = torch.randn(64, 3, generator=g) * 3 + 1
        assert all(torch.equal(x, y) for x, y in zip(a.act(obs), b.act(obs)))
    assert torch.equal(a.greedy(obs), b.greedy(obs))


def test_weights_carry_the_statistics_as_flat_entries() -> None:
    """The learner's weights with its observation statistics are one flat mapping (what may cross
    a fragment cut), and the actor reads network and statistics back from it."""
    learner_net = ActorCritic(3, BOX, hidden=16, seed=4)
    stats = RunningMeanStd((3,))
    stats.update(torch.randn(10, 3, generator=_gen(0)) * 4 + 2)
    weights = {**learner_net.state_dict(), **obs_stats_weights(stats)}
    assert all(isinstance(value, (torch.Tensor, int, float)) for value in weights.values())
    assert {"obs_stats.mean", "obs_stats.var", "obs_stats.count"} <= set(weights)
    actor = ActorCriticActor(ActorCritic(3, BOX, hidden=16, seed=0), seed=1, normalize_obs=True, obs_shape=(3,))
    actor.set_weights(weights)
    assert all(torch.equal(a, b) for a, b in zip(actor.net.state_dict().values(), learner_net.state_dict().values()))
    assert torch.equal(actor.obs_stats.mean, stats.mean) and actor.obs_stats.count == 10
    plain = ActorCriticActor(ActorCritic(3, BOX, hidden=16, seed=0), seed=1)
    plain.set_weights(weights)  # an actor without normalisation takes the network and ignores the statistics
    assert plain.obs_stats is None


def test_load_weights_is_load_state_dict() -> None:
    """The copy of every tensor at once lands what ``load_state_dict`` lands (a float64 source cast
    as it casts it), and what ``load_state_dict`` refuses it refuses with the same error."""
    source = ActorCritic(4, BOX, 16, seed=1)
    weights = {k: v.double() * 3 for k, v in copy_weights(source).items()}
    by_copy, by_load = ActorCritic(4, BOX, 16, seed=2), ActorCritic(4, BOX, 16, seed=2)
    load_weights(by_copy, weights)
    by_load.load_state_dict(weights)
    for (k1, v1), (k2, v2) in zip(by_copy.state_dict().items(), by_load.state_dict().items()):
        assert k1 == k2 and v1.dtype == torch.float32 and torch.equal(v1, v2)
    missing = {k: v for k, v in weights.items() if k != "critic.0.bias"}
    with pytest.raises(RuntimeError, match="Missing key"):
        load_weights(by_copy, missing)
    reshaped = {**weights, "critic.0.bias": torch.zeros(3)}
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_weights(by_copy, reshaped)
