"""An actor's ``act`` as one compiled region (``algo.compile: true``): the same actions, log
probabilities and values as the eager actor, drawn from the same random stream (the noise is drawn
outside the region, from the actor's generator), with weights that arrive after the build seen at
the next call; one graph, no break, no host sync.  Traced as inductor traces it (``aot_eager``,
seconds) in the default suite; built by inductor into a package, and loaded by a second actor
without a rebuild, under -m slow."""

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
from msrl.rl import (
    ActorCritic,
    ActorCriticActor,
    CompiledAct,
    CompiledCall,
    TwinMLP,
    categorical_noise,
    sample_categorical,
)

NETS: dict[str, tuple[Callable[[], torch.nn.Module], int]] = {
    "twin-discrete": (lambda: TwinMLP(4, 3, 16, torch.Generator().manual_seed(0)), 4),
    "actor-critic-discrete": (lambda: ActorCritic(4, Discrete(3), 16, seed=0), 4),
    "actor-critic-box": (lambda: ActorCritic(3, Box(-2.0, 2.0, (2,)), 16, seed=0, log_std_init=-0.5), 3),
}


def _actors(case: str, backend: str) -> tuple[ActorCriticActor, ActorCriticActor, int]:
    make, obs_dim = NETS[case]
    eager, compiled = ActorCriticActor(make(), seed=7), ActorCriticActor(make(), seed=7, compile="default")
    assert eager.compiled is None and compiled.compiled is not None
    if backend != "inductor":
        compiled.compiled = CompiledAct(compiled.net, "default", backend=backend)
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
    assert torch.equal(compiled.generator.get_state(), eager.generator.get_state())  # the same draws, no more


def _new_weights(actor: ActorCriticActor, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.5 * torch.randn(v.shape, generator=g) for k, v in actor.net.state_dict().items()}


@pytest.mark.parametrize("case", sorted(NETS))
def test_the_traced_act_draws_and_scores_as_the_eager_one(case: str) -> None:
    eager, compiled, obs_dim = _actors(case, "aot_eager")
    _assert_same_acts(eager, compiled, obs_dim, seed=1)
    weights = _new_weights(eager, seed=2)  # a learner's update, after the region was traced
    eager.set_weights(weights)
    compiled.set_weights(weights)
    _assert_same_acts(eager, compiled, obs_dim, seed=3)


@pytest.mark.parametrize("case", sorted(NETS))
def test_the_value_of_a_rollouts_last_observations_comes_from_the_act_region(case: str) -> None:
    """With the act's rows the value is the region's, drawing nothing; other rows are eager."""
    eager, compiled, obs_dim = _actors(case, "aot_eager")
    obs = torch.randn(32, obs_dim).numpy()
    eager.act(obs), compiled.act(obs)
    state, region, calls = compiled.generator.get_state(), compiled.compiled.call, []
    compiled.compiled.call = lambda *args: calls.append(args[0].shape[0]) or region(*args)
    for rows in (32, 5):
        torch.testing.assert_close(compiled.value(obs[:rows]), eager.value(obs[:rows]), rtol=1e-5, atol=1e-5)
    assert calls == [32]  # 5 rows: eager, no region built for them
    assert torch.equal(compiled.generator.get_state(), state)


@pytest.mark.parametrize("case", sorted(NETS))
def test_the_act_region_has_one_graph_no_break_and_no_sync(case: str) -> None:
    _, actor, obs_dim = _actors(case, "aot_eager")
    assert actor.compiled is not None
    obs = torch.randn(8, obs_dim)
    noise = actor.compiled.head.noise((8, actor.compiled.outputs), actor.generator)
    state = actor.compiled.state()
    explanation = torch._dynamo.explain(actor.compiled.step.fn)(state, obs, noise)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0, explanation.break_reasons
    with SyncCounter() as counter:
        actor.compiled.step.fn(state, obs, noise)
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
@pytest.mark.parametrize("case", ["twin-discrete", "actor-critic-box"])
def test_a_built_act_is_loaded_by_the_next_actor(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    eager, first, obs_dim = _actors(case, "inductor")
    _assert_same_acts(eager, first, obs_dim, seed=1)
    assert first.compiled is not None and first.compiled.step.aot is not None, "nothing was built"
    packages = sorted((tmp_path / "cache").rglob("*.pt2"))
    assert len(packages) == 1
    eager, second, _ = _actors(case, "inductor")
    weights = _new_weights(eager, seed=2)
    eager.set_weights(weights)
    second.set_weights(weights)
    _assert_same_acts(eager, second, obs_dim, seed=3)
    assert sorted((tmp_path / "cache").rglob("*.pt2")) == packages  # loaded, not built again
    assert second.metrics()["actor_compile_seconds"] < 5.0


def _off_policy_actors(kind: str) -> tuple[Any, Any, int]:
    """An eager and a compiled DQN or SAC actor (same seeds), the compiled one traced as inductor would."""
    run = RunInfo(seed=3, total_env_steps=10_000)
    eager: Any
    compiled: Any
    if kind == "dqn":
        eager, compiled = (
            DQNActor(4, 3, DQNConfig(compile=c, hidden_sizes=[16, 16], start_epsilon=0.5, end_epsilon=0.5), run)
            for c in (False, True)
        )
        net = compiled.q
    else:
        configs = (SACConfig(compile=c, hidden_sizes=(16, 16), learning_starts=0) for c in (False, True))
        eager, compiled = (SACActor(3, Box(-2.0, 2.0, (2,)), config, run) for config in configs)
        net = compiled.policy
    assert eager.compiled is None and compiled.compiled is not None
    compiled.compiled = CompiledCall(net, compiled.compiled.fn, "default", "aot_eager")
    return eager, compiled, 4 if kind == "dqn" else 3


@pytest.mark.parametrize("kind", ["dqn", "sac"])
def test_the_traced_off_policy_acts_draw_as_the_eager_ones(kind: str) -> None:
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
