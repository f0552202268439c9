"""An actor's draw runs one piece of code eagerly and as one compiled region (``msrl.rl.CompiledCall``):
the same actions, log probabilities and values from the same random stream (the noise is drawn
outside the region, from the actor's generator), with weights that arrive after the region was
built seen at the next call; one graph, no break, no host sync.  The region runs as its traced
graph here (seconds); built by inductor into a package, and loaded by a second actor without a
rebuild, under -m slow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from test_compiled_learner import SyncCounter

from algorithms.dqn import DQNActor, DQNConfig
from algorithms.sac import SACActor, SACConfig
from msrl.core import Box, Discrete, RunInfo
from msrl.rl import ActorCritic, ActorCriticActor, CompiledCall, categorical_noise, sample_categorical

NETS: dict[str, tuple[Callable[[], torch.nn.Module], int]] = {
    "actor-critic-discrete": (lambda: ActorCritic(4, Discrete(3), 16, seed=0), 4),
    "actor-critic-box": (lambda: ActorCritic(3, Box(-2.0, 2.0, (2,)), 16, seed=0, log_std_init=-0.5), 3),
}


def _compile(call: CompiledCall, backend: str = "traced") -> None:
    """``call`` compiled from its next call on (traced, or built by inductor)."""
    region = call.region
    region.option, region.started, region.backend = "true", False, backend


def _actors(case: str, backend: str = "traced") -> tuple[ActorCriticActor, ActorCriticActor, int]:
    make, obs_dim = NETS[case]
    eager, compiled = ActorCriticActor(make(), seed=7), ActorCriticActor(make(), seed=7)
    _compile(compiled.draw, backend)
    return eager, compiled, obs_dim


def _assert_same_acts(eager: ActorCriticActor, compiled: ActorCriticActor, obs_dim: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(4):
        obs = torch.randn(32, obs_dim, generator=g).numpy()  # what an environment hands an actor
        (a1, lp1, v1), (a2, lp2, v2) = eager.act(obs), compiled.act(obs)
        if a1.dtype == torch.int64:
            assert torch.equal(a2, a1)
        else:
            torch.testing.assert_close(a2, a1, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(lp2, lp1, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v2, v1, rtol=1e-5, atol=1e-5)
    assert compiled.draw.ready and not eager.draw.ready
    assert torch.equal(compiled.generator.get_state(), eager.generator.get_state())  # the same draws, no more


def _new_weights(actor: ActorCriticActor, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.5 * torch.randn(v.shape, generator=g) for k, v in actor.net.state_dict().items()}


@pytest.mark.parametrize("case", sorted(NETS))
def test_the_compiled_act_draws_and_scores_as_the_eager_one(case: str) -> None:
    eager, compiled, obs_dim = _actors(case)
    _assert_same_acts(eager, compiled, obs_dim, seed=1)
    weights = _new_weights(eager, seed=2)  # a learner's update, after the region was built
    eager.set_weights(weights)
    compiled.set_weights(weights)
    _assert_same_acts(eager, compiled, obs_dim, seed=3)


@pytest.mark.parametrize("case", sorted(NETS))
def test_the_value_of_a_rollouts_last_observations_comes_from_the_act_region(case: str) -> None:
    """With the act's rows the value is the region's, drawing nothing; other rows are eager."""
    eager, compiled, obs_dim = _actors(case)
    obs = torch.randn(32, obs_dim).numpy()
    eager.act(obs), compiled.act(obs)
    state, region, calls = compiled.generator.get_state(), compiled.draw.region.runner, []
    assert region is not None
    compiled.draw.region.runner = lambda *args: calls.append(args[1].shape[0]) or region(*args)
    for rows in (32, 5):
        torch.testing.assert_close(compiled.value(obs[:rows]), eager.value(obs[:rows]), rtol=1e-5, atol=1e-5)
    assert calls == [32]  # 5 rows: eager, no region built for them
    assert torch.equal(compiled.generator.get_state(), state)


@pytest.mark.parametrize("case", sorted(NETS))
def test_the_act_region_has_one_graph_no_break_and_no_sync(case: str) -> None:
    _, actor, obs_dim = _actors(case)
    obs = torch.randn(8, obs_dim)
    noise = actor.net.head.noise((8, actor.outputs), actor.generator)
    state = actor.draw.state()
    explanation = torch._dynamo.explain(actor.draw.region.fn)(state, obs, noise)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0, explanation.break_reasons
    with SyncCounter() as counter:
        actor.draw.region.fn(state, obs, noise)
    assert counter.ops > 5 and counter.syncs == []


def test_a_categorical_draw_from_given_noise_is_the_draw_itself() -> None:
    logits = torch.randn(64, 5, generator=torch.Generator().manual_seed(0))
    drawn = sample_categorical(logits, torch.Generator().manual_seed(4))
    uniform = categorical_noise(logits.shape, torch.Generator().manual_seed(4))
    kept = uniform.clone()
    given = sample_categorical(logits, None, uniform)
    assert torch.equal(given[0], drawn[0]) and torch.equal(given[1], drawn[1])
    assert torch.equal(uniform, kept)  # the caller's draw is left as it was


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(NETS))
def test_a_built_act_is_loaded_by_the_next_actor(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    eager, first, obs_dim = _actors(case, "inductor")
    _assert_same_acts(eager, first, obs_dim, seed=1)
    packages = sorted((tmp_path / "cache").rglob("*.pt2"))
    assert len(packages) == 1, "nothing was built"
    make, _ = NETS[case]
    monkeypatch.setenv("MSRL_COMPILE", "auto")  # a default run: compiled from its first act, from the cache
    eager, second = ActorCriticActor(make(), seed=7), ActorCriticActor(make(), seed=7, compile="auto")
    weights = _new_weights(eager, seed=2)
    eager.set_weights(weights)
    second.set_weights(weights)
    _assert_same_acts(eager, second, obs_dim, seed=3)
    assert sorted((tmp_path / "cache").rglob("*.pt2")) == packages  # loaded, not built again


def _off_policy_actors(kind: str) -> tuple[Any, Any, int]:
    """An eager and a compiled DQN or SAC actor (same seeds)."""
    run = RunInfo(seed=3, total_env_steps=10_000)
    eager: Any
    compiled: Any
    if kind == "dqn":
        eager, compiled = (
            DQNActor(4, 3, DQNConfig(compile=False, hidden_sizes=[16, 16], start_epsilon=0.5, end_epsilon=0.5), run)
            for _ in range(2)
        )
        _compile(compiled.choose)
    else:
        configs = (SACConfig(compile=False, hidden_sizes=(16, 16), learning_starts=0) for _ in range(2))
        eager, compiled = (SACActor(3, Box(-2.0, 2.0, (2,)), config, run) for config in configs)
        _compile(compiled.draw)
    return eager, compiled, 4 if kind == "dqn" else 3


@pytest.mark.parametrize("kind", ["dqn", "sac"])
def test_the_compiled_off_policy_acts_draw_as_the_eager_ones(kind: str) -> None:
    """DQN's epsilon-greedy choice (exploring half the time, so both branches are taken) and SAC's
    policy draw: the same actions from the same random stream, before and after new weights."""
    eager, compiled, obs_dim = _off_policy_actors(kind)
    g = torch.Generator().manual_seed(0)
    for _weights in range(2):
        for _ in range(3):
            obs = torch.randn(16, obs_dim, generator=g).numpy()
            torch.testing.assert_close(compiled.act(obs), eager.act(obs), rtol=1e-5, atol=1e-6)
        assert torch.equal(compiled.generator.get_state(), eager.generator.get_state())
        net = eager.q if kind == "dqn" else eager.policy
        weights = {k: v + 0.5 * torch.randn(v.shape, generator=g) for k, v in net.state_dict().items()}
        eager.set_weights(weights)
        compiled.set_weights(weights)
    assert (compiled.choose if kind == "dqn" else compiled.draw).ready
