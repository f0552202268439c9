"""MAPPO as its paper runs it: active masks (agents out of the game leave the losses) and value
normalisation (statistics of the value targets, learner state that reaches the actors, the
checkpoints and every learner copy alike).  Through the public pieces: an environment of our own
registered with ``msrl.envs.register``, the algorithm class, its components."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import torch

import msrl
import msrl.envs
from algorithms.mappo import MAPPO, MAPPOConfig, policy_map
from msrl.core import AgentGroup, Batched, Box, ConfigError, Deferred, Discrete, RunInfo

LENGTH, LEAVE = 6, 2
"""Episodes last LENGTH steps; agent 1 leaves the game after its LEAVE-th step."""


class Leaver(msrl.Environment):
    """Two agents of one group.  Agent 1 plays its first LEAVE steps and is then out of the game
    until the episode ends (``active()`` says so); while out it gets reward ``junk``, which an
    algorithm that masks it never sees.  An agent in the game gets 1 for action 1, 0 for action 0."""

    groups = {"agents": AgentGroup("agents", 2, Box(-1.0, 1.0, (3,)), Discrete(2))}
    num_agents = 2

    def __init__(self, num_envs: int, seed: int = 0, junk: float = 0.0) -> None:
        self.num_envs, self.junk = num_envs, junk
        self.observation_space = {"agents": self.groups["agents"].observation_space}  # type: ignore[assignment]
        self.action_space = {"agents": self.groups["agents"].action_space}  # type: ignore[assignment]
        self.t = np.zeros(num_envs, dtype=np.int64)

    def reset(self, seed: int | None = None) -> Batched:
        self.t[:] = 0
        return self.observe()

    def active(self) -> Batched:
        return {"agents": np.stack([np.ones(self.num_envs), self.t < LEAVE], 1).astype(np.float32)}

    def observe(self) -> Batched:
        obs = np.zeros((self.num_envs, 2, 3), np.float32)
        obs[:, :, 0] = (self.t / LENGTH)[:, None]
        obs[:, 1, 1] = 1.0
        obs[:, :, 2] = self.active()["agents"]
        return {"agents": obs}

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        active = self.active()["agents"]
        reward = np.where(active > 0, (np.asarray(action["agents"]) == 1).astype(np.float32), self.junk)
        self.t += 1
        truncated = (self.t >= LENGTH).astype(np.float32)
        self.t[truncated > 0] = 0
        return self.observe(), {"agents": reward.astype(np.float32)}, np.zeros(self.num_envs, np.float32), truncated


msrl.envs.register("Leaver-v0", "numpy", Leaver)


def algorithm(junk: float = 0.0, **config: Any) -> MAPPO:
    settings: dict[str, Any] = {"num_envs": 4, "num_steps": 12, "update_epochs": 2, "hidden_size": 16, **config}
    return MAPPO(
        MAPPOConfig(env_id="Leaver-v0", env_kwargs={"junk": junk}, **settings), RunInfo(seed=3, total_env_steps=480)
    )


def learner_weights(algo: MAPPO, iterations: int = 3) -> dict[str, torch.Tensor]:
    for _ in range(iterations):
        algo.train_step()
    return {k: v.clone() for k, v in algo.learner.agents.state_dict().items()}


def captured_batch(algo: MAPPO) -> dict[str, torch.Tensor]:
    """The batch the learner learns from in the next iteration."""
    seen: list[dict[str, torch.Tensor]] = []
    learn = algo.learner.learn

    def capture(batch: Any) -> Any:
        seen.append({k: v.clone() for k, v in batch.items()})
        return learn(batch)

    algo.learner.learn = capture  # type: ignore[method-assign]
    algo.train_step()
    return seen[0]


def test_an_agent_out_of_the_game_leaves_the_losses() -> None:
    """What an agent gets while out of the game changes nothing in the update with active masks
    (the same weights to the bit), and changes the update without them."""
    quiet, noisy = learner_weights(algorithm(junk=0.0)), learner_weights(algorithm(junk=37.0))
    assert all(torch.equal(quiet[k], noisy[k]) for k in quiet)
    quiet, noisy = (learner_weights(algorithm(junk=j, active_masks=False)) for j in (0.0, 37.0))
    assert not all(torch.equal(quiet[k], noisy[k]) for k in quiet)


def test_the_step_an_agent_leaves_ends_its_episode_and_its_later_steps_are_masked() -> None:
    algo = algorithm(value_norm=False, clip_value_loss=False)
    batch = captured_batch(algo)
    active = batch["agents/active"].reshape(12, 4, 2)
    t = np.arange(12) % LENGTH  # every env starts at t = 0 and steps in lockstep
    assert torch.equal(active[:, :, 0], torch.ones(12, 4))
    assert torch.equal(active[:, :, 1], torch.as_tensor(t < LEAVE, dtype=torch.float32)[:, None].expand(12, 4))
    # the leaving step (t = LEAVE - 1) is terminal for agent 1: advantage = reward - V(s), no bootstrap
    values, advantages = (batch[f"agents/{k}"].reshape(12, 4, 2)[:, :, 1] for k in ("values", "advantages"))
    rewards = (batch["agents/actions"].reshape(12, 4, 2)[:, :, 1] == 1).float()
    leaving = torch.as_tensor(t == LEAVE - 1)
    assert torch.allclose(advantages[leaving], rewards[leaving] - values[leaving], atol=1e-6)
    metrics: Any = algo.train_step()
    metrics = metrics.resolve() if isinstance(metrics, Deferred) else metrics
    assert metrics["active_fraction"] == pytest.approx((2 * LENGTH - (LENGTH - LEAVE)) / (2 * LENGTH))


def test_without_an_active_method_every_agent_stays_in() -> None:
    algo = MAPPO(MAPPOConfig(num_envs=2, num_steps=4, update_epochs=1), RunInfo(seed=0, total_env_steps=80))
    assert not algo.masked
    assert torch.equal(captured_batch(algo)["agents/active"], torch.ones(8, 3))


def test_a_relu_layernorm_network_reaches_the_learner_and_the_actors() -> None:
    """``activation: relu`` and ``layer_norm: true`` (the paper's MLPBase with ReLU) build every policy that
    way, for the learner and the actors alike, and the two stay equal after learning."""
    algo = algorithm(activation="relu", layer_norm=True)
    weights = learner_weights(algo, iterations=1)
    for agents in (algo.learner.agents, algo.actor.agents):
        kinds = {type(m) for m in agents.modules()}
        assert torch.nn.LayerNorm in kinds and torch.nn.ReLU in kinds and torch.nn.Tanh not in kinds
    actor = algo.actor.agents.state_dict()
    assert any("critic.0.weight" in k for k in weights) and all(torch.equal(weights[k], actor[k]) for k in weights)
    plain = {type(m) for m in algorithm().learner.agents.modules()}
    assert torch.nn.LayerNorm not in plain and torch.nn.Tanh in plain


def test_value_statistics_follow_the_returns_and_reach_the_actors() -> None:
    """After one iteration the (debiased) statistics are the batch's returns of agents in the game;
    the actors get them with the weights and denormalise with them, so the values GAE sees are in
    the rewards' units."""
    algo = algorithm()
    batch = captured_batch(algo)
    mask = batch["agents/active"] > 0
    returns = batch["agents/returns"][mask].double()
    norm = algo.learner.agents.value_norm("agents")
    assert norm is not None
    mean, var = norm.mean_var()
    assert mean.item() == pytest.approx(returns.mean().item(), rel=1e-6)
    assert var.item() == pytest.approx(max(returns.var(unbiased=False).item(), 1e-2), rel=1e-6)
    actor_state, learner_state = algo.actor.agents.state_dict(), algo.learner.agents.state_dict()
    assert all(torch.equal(actor_state[k], learner_state[k]) for k in learner_state if "value_norms" in k)
    obs = {"agents": torch.rand(5, 2, 3)}
    raw = algo.actor.agents.predictions(obs)["agents"]
    assert torch.allclose(algo.actor.value(obs)["agents"], norm.denormalize(raw))


def test_value_statistics_are_in_the_learners_checkpoint() -> None:
    algo = algorithm()
    learner_weights(algo, 2)
    copy = algorithm()
    copy.learner.load_state_dict(algo.learner.state_dict())
    copy.actor.load_state_dict(algo.actor.state_dict())
    for a, b in ((algo.learner, copy.learner), (algo.actor, copy.actor)):
        norm_a, norm_b = a.agents.value_norm("agents"), b.agents.value_norm("agents")
        assert norm_a is not None and norm_b is not None and norm_a.debiasing_term.item() > 0
        assert torch.equal(torch.stack(norm_a.mean_var()), torch.stack(norm_b.mean_var()))


class PairAverage:
    """Two learner copies in two threads averaging gradients and statistics, as a
    ``multi_learner`` all-reduce does (``Learner.grad_sync``: called on parameters, ``mean_`` on tensors)."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=30)
        self.slots: list[list[torch.Tensor]] = [[], []]

    def member(self, index: int) -> Any:
        pair = self

        class Member:
            def __call__(self, parameters: Any) -> None:
                self.mean_([p.grad for p in parameters if p.grad is not None])

            def mean_(self, tensors: list[torch.Tensor]) -> None:
                pair.slots[index] = [t.clone() for t in tensors]
                pair.barrier.wait()
                for t, a, b in zip(tensors, *pair.slots):
                    t.copy_((a + b) / 2)
                pair.barrier.wait()

        return Member()


def test_learner_copies_keep_the_same_value_statistics() -> None:
    """Under multi_learner each copy learns from its own environments' batch: their value
    statistics (and weights) stay equal because the batch sums are averaged over copies."""
    copies = [algorithm(num_envs=2), algorithm(num_envs=2)]
    pair = PairAverage()
    for index, algo in enumerate(copies):
        algo.learner.grad_sync = pair.member(index)
    batch = captured_batch(algorithm(num_envs=2))  # a batch of one copy's shape; the other's returns differ
    batches = [batch, {k: v + (1.5 if k.endswith("returns") else 0.0) for k, v in batch.items()}]
    threads = [threading.Thread(target=lambda a=a, b=b: a.learner.learn(b)) for a, b in zip(copies, batches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    norms = [a.learner.agents.value_norm("agents") for a in copies]
    assert norms[0] is not None and norms[1] is not None
    assert torch.equal(torch.stack(norms[0].mean_var()), torch.stack(norms[1].mean_var()))
    returns = torch.cat([b["agents/returns"][b["agents/active"] > 0] for b in batches]).double()
    assert norms[0].mean_var()[0].item() == pytest.approx(returns.mean().item(), rel=1e-6)
    w0, w1 = (a.learner.agents.state_dict() for a in copies)
    assert all(torch.allclose(w0[k], w1[k]) for k in w0)


def test_groups_whose_observations_differ_in_shape_cannot_share_a_policy_and_the_line_names_their_spaces() -> None:
    groups = {
        "adversary": AgentGroup("adversary", 1, Box(np.full(8, -np.inf), np.full(8, np.inf), (8,)), Discrete(5)),
        "agent": AgentGroup("agent", 2, Box(np.full(10, -np.inf), np.full(10, np.inf), (10,)), Discrete(5)),
    }
    with pytest.raises(ConfigError) as error:
        policy_map("adv", groups, {}, "ippo")
    message = str(error.value)
    assert "\n" not in message
    for part in ("'adversary': Box(8,) observations, Discrete(5) actions", "'agent': Box(10,) observations",
                 "algo.policies={adversary: adversary, agent: agent}"):  # fmt: skip
        assert part in message, message
    assert policy_map("adv", groups, {"adversary": "adversary", "agent": "agent"}, "ippo") == {
        "adversary": "adversary",
        "agent": "agent",
    }


def test_boxes_compare_by_shape_dtype_and_bounds_a_number_standing_for_every_element() -> None:
    assert Box(0.0, 1.0, (3,)) == Box(np.zeros(3), np.ones(3), (3,))
    assert Box(0.0, 1.0, (3,)) != Box(0.0, 1.0, (4,))  # no broadcasting error between the shapes
    assert Box(0.0, 1.0, (3,)) != Box(0.0, 2.0, (3,))
    assert Box(0.0, 1.0, (3,)) != Box(0.0, 1.0, (3,), dtype="uint8")
    assert Box(np.zeros(2), 1.0, (3,)) != Box(0.0, 1.0, (3,))  # a bound that is not of the space's shape
