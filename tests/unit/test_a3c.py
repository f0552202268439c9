"""A3C (``algorithms/a3c.py``): an actor's gradient applied by the learner is A2C's step on the same
rollout; the actor's gradient and the learner's application of it, compiled (``GradientStep``'s two
halves as regions), equal the eager ones, each one graph; gradients gathered from several actors are
applied one optimiser step each, in replica order, with their staleness reported and the stale ones
dropped; the gradients cross from the actors' fragment to the learner's as a gather; bad settings
get one line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from algorithms.a2c import A2CConfig, A2CLearner
from algorithms.a3c import A3CActor, A3CConfig, A3CLearner, network
from fragments import PER_ITERATION, concat_batched
from msrl.app import load_config, plan
from msrl.core import ConfigError, Discrete, RunInfo, ValueKind
from msrl.rl import RolloutBatch

REPO = Path(__file__).resolve().parents[2]
SPACE = Discrete(2)
RUN = RunInfo(seed=3, total_env_steps=1000)
SHARED = dict(num_envs=4, num_steps=5, learning_rate=1e-2, vf_coef=0.5, ent_coef=0.01, max_grad_norm=0.5)


def _rollout(seed: int, rows: int = 20) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    return RolloutBatch(
        torch.randn(rows, 4, generator=g),
        torch.randint(0, 2, (rows,), generator=g),
        torch.randn(rows, generator=g),
        torch.randn(rows, generator=g),
        torch.randn(rows, generator=g),
        torch.randn(rows, generator=g),
    )


def _actor(config: A3CConfig) -> A3CActor:
    return A3CActor(network(4, SPACE, config, RUN.seed_for("weights")), config, RUN)


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_one_actors_gradient_applied_by_the_learner_is_a2cs_step_on_the_same_rollout(optimizer: str) -> None:
    config = A3CConfig(**SHARED, optimizer=optimizer, compile=False)
    a2c = A2CLearner(4, SPACE, A2CConfig(**SHARED, optimizer=optimizer, compile=False), RUN)
    learner, actor = A3CLearner(4, SPACE, config, RUN), _actor(config)
    for seed in (1, 2):  # two rollouts: the second from weights both moved
        batch = _rollout(seed)
        a2c.learn(batch)
        metrics = learner.learn(actor.gradients(batch))
        actor.set_weights(learner.get_weights())
        for ours, theirs in zip(learner.net.parameters(), a2c.net.parameters()):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        assert metrics["staleness"] == 0.0 and metrics["dropped_gradients"] == 0.0
    assert actor.version == learner.updates == 2
    for ours, theirs in zip(actor.net.parameters(), learner.net.parameters()):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_the_compiled_gradient_and_its_application_equal_the_eager_ones(optimizer: str) -> None:
    """Two actors' gradients applied over two iterations, eagerly and as the regions' traced graphs
    (the arithmetic inductor builds): the same weights and optimizer state, the same loss terms."""
    runs = {}
    for compiled in (False, True):
        config = A3CConfig(**SHARED, optimizer=optimizer, compile=False)
        learner, actors = A3CLearner(4, SPACE, config, RUN), [_actor(config), _actor(config)]
        if compiled:
            for step in (learner.step, *(actor.step for actor in actors)):
                for region in step.regions.values():
                    region.option, region.started, region.backend = "true", False, "traced"
        metrics = []
        for seed in (1, 2):
            gathered = concat_batched([a.gradients(_rollout(10 * seed + i)) for i, a in enumerate(actors)])
            metrics.append(learner.learn(gathered))
            for actor in actors:
                actor.set_weights(learner.get_weights())
        runs[compiled] = (learner, actors, metrics)
    (eager, _, want), (learner, actors, got) = runs[False], runs[True]
    assert learner.step.regions["apply"].ready and all(a.step.regions["grad"].ready for a in actors)
    assert not any(a.step.regions["step"].started for a in actors)  # an actor never steps
    for ours, theirs in zip(got, want):
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6)
    for ours, theirs in zip(learner.net.parameters(), eager.net.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    ours_state, theirs_state = learner.optimizer.state_dict()["state"], eager.optimizer.state_dict()["state"]
    for index, state in theirs_state.items():
        for key, value in state.items():
            torch.testing.assert_close(torch.as_tensor(ours_state[index][key]), torch.as_tensor(value))
    assert (_params(learner.net)[0] - _params(_actor(A3CConfig(**SHARED)).net)[0]).abs().max() > 1e-4


def test_each_half_is_one_graph_without_a_break() -> None:
    config = A3CConfig(**SHARED, compile=False)
    learner, actor = A3CLearner(4, SPACE, config, RUN), _actor(config)
    obs, actions, _, _, advantages, returns = _rollout(1)
    params, read = actor.step._views()
    grad = torch._dynamo.explain(actor.step.regions["grad"].fn)(params, read, obs, actions, advantages, returns)
    assert grad.graph_count == 1 and grad.graph_break_count == 0, grad.break_reasons
    params, read, states, lr = learner.step.arguments()
    grads = tuple(torch.ones_like(p) for p in params)
    apply = torch._dynamo.explain(learner.step.regions["apply"].fn)(params, grads, states, lr)
    assert apply.graph_count == 1 and apply.graph_break_count == 0, apply.break_reasons


def test_a_step_without_an_optimizer_only_differentiates() -> None:
    actor = _actor(A3CConfig(**SHARED, compile=False))
    grads = [torch.zeros_like(p) for p in actor.net.parameters()]
    with pytest.raises(ValueError, match="no optimizer: it computes gradients only"):
        actor.step.apply(grads)


def test_gathered_gradients_are_applied_one_step_each_in_replica_order_and_report_their_staleness() -> None:
    config = A3CConfig(**SHARED, compile=False)
    learner = A3CLearner(4, SPACE, config, RUN)
    first, second = _actor(config), _actor(config)
    gathered = concat_batched([first.gradients(_rollout(1)), second.gradients(_rollout(2))])  # what a gather makes
    expected = copy.deepcopy(learner)
    for row in range(2):  # each row on its own, in order, as two optimiser steps
        for param, name in zip(expected.params, expected.names):
            param.grad = gathered["grad." + name][row].clone()
        torch.nn.utils.clip_grad_norm_(expected.params, config.max_grad_norm)
        expected.optimizer.step()
    metrics = learner.learn(gathered)
    for ours, theirs in zip(learner.params, expected.params):
        torch.testing.assert_close(ours, theirs)
    # both computed at version 0: the first applied at once, the second one step late
    assert metrics["staleness"] == 0.5 and metrics["staleness_max"] == 1.0
    assert learner.updates == 2 and int(learner.get_weights()["version"]) == 2
    terms = gathered["terms"].mean(0).tolist()
    assert [metrics[k] for k in ("policy_loss", "value_loss", "entropy")] == pytest.approx(terms)


def test_gradients_staler_than_the_bound_are_dropped_and_counted() -> None:
    config = A3CConfig(**SHARED, compile=False, max_staleness=1)
    learner, actor = A3CLearner(4, SPACE, config, RUN), _actor(config)
    old = actor.gradients(_rollout(1))  # computed at version 0
    learner.learn(concat_batched([actor.gradients(_rollout(2)) for _ in range(2)]))  # now at version 2
    before = _params(learner.net)
    metrics = learner.learn(concat_batched([old, old]))  # staleness 2, then (were it applied) 3
    assert metrics["dropped_gradients"] == 2.0 and "staleness" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(before, learner.net.parameters()))
    unbounded = A3CLearner(4, SPACE, A3CConfig(**SHARED, compile=False, max_staleness=-1), RUN)
    unbounded.updates = 100
    assert unbounded.learn(old)["staleness"] == 100.0


def test_a_checkpoint_keeps_the_weights_version_of_actor_and_learner() -> None:
    config = A3CConfig(**SHARED, compile=False)
    learner, actor = A3CLearner(4, SPACE, config, RUN), _actor(config)
    learner.learn(actor.gradients(_rollout(1)))
    actor.set_weights(learner.get_weights())
    fresh_learner, fresh_actor = A3CLearner(4, SPACE, config, RUN), _actor(config)
    fresh_learner.load_state_dict(learner.state_dict())
    fresh_actor.load_state_dict(actor.state_dict())
    assert fresh_learner.updates == fresh_actor.version == 1


def test_gradients_cross_from_the_actors_fragment_to_the_learner_as_a_gather_of_one_row_per_actor() -> None:
    config = load_config(
        str(REPO / "configs" / "a3c_cartpole.yaml"), ["policy=single_learner_coarse", "algo.compile=false"]
    )
    interfaces = {(str(i.value), i.src, i.dst): (i.op, i.kind, i.frequency) for i in plan(config).fdg.interfaces}
    assert interfaces[("%actor.gradients", "rollout", "learner")] == ("gather", ValueKind.BATCHED, PER_ITERATION)
    assert interfaces[("%learner.get_weights", "learner", "rollout")][0] == "broadcast"
    assert not any(src == "rollout" and "buffer" in value for value, src, _ in interfaces)  # no rollout crosses


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("algo.max_staleness=-2", "algo.max_staleness must be >= 0, or -1"),
        ("algo.optimizer=sgd", "algo.optimizer must be one of: rmsprop, adam"),
        ("algo.num_steps=0", "algo.num_steps must be >= 1"),
    ],
)
def test_bad_settings_get_one_line(setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(str(REPO / "configs" / "a3c_cartpole.yaml"), [setting]).algo.validate()
