"""Recurrent MAPPO (the paper's rMAPPO, ``algo.recurrent``): the learner replays exactly what the
actors did, memories are blank where episodes begin and carried everywhere else, they survive a
checkpoint, and a recurrent policy solves a task that needs a memory where a feed-forward one
cannot.  Through the algorithm class and its components, with environments registered through
``msrl.envs.register``."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from test_mappo_parts import algorithm, captured_batch

import msrl
import msrl.envs
from algorithms.mappo import MAPPO, MAPPOConfig
from msrl.core import AgentGroup, Batched, Box, ConfigError, Discrete, RunInfo

ENVS, STEPS = 4, 9
"""The Leaver environment's episodes last 6 steps: a 9-step rollout ends and begins mid-episode."""


class Cue(msrl.Environment):
    """Two agents, two-step episodes.  On the first step each agent sees its cue (-1 or 1); on the
    second it sees nothing, and earns 1 for the action that names its cue (0 for -1, 1 for 1).  A
    policy without memory earns 0.5 an episode at best."""

    groups = {"agents": AgentGroup("agents", 2, Box(-1.0, 1.0, (2,)), Discrete(2))}
    num_agents = 2

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.num_envs, self.rng = num_envs, np.random.default_rng(seed)
        self.observation_space = {"agents": self.groups["agents"].observation_space}  # type: ignore[assignment]
        self.action_space = {"agents": self.groups["agents"].action_space}  # type: ignore[assignment]
        self.t = np.zeros(num_envs, np.int64)
        self.cue = self.rng.integers(0, 2, (num_envs, 2))

    def reset(self, seed: int | None = None) -> Batched:
        self.rng = np.random.default_rng(seed) if seed is not None else self.rng
        self.t[:], self.cue = 0, self.rng.integers(0, 2, (self.num_envs, 2))
        return self.observe()

    def observe(self) -> Batched:
        obs = np.zeros((self.num_envs, 2, 2), np.float32)
        first = (self.t == 0)[:, None]
        obs[:, :, 0], obs[:, :, 1] = np.where(first, 2.0 * self.cue - 1.0, 0.0), first
        return {"agents": obs}

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        named = (np.asarray(action["agents"]) == self.cue).astype(np.float32)
        reward = np.where((self.t == 1)[:, None], named, 0.0).astype(np.float32)
        self.t += 1
        ended = self.t >= 2
        self.t[ended], self.cue[ended] = 0, self.rng.integers(0, 2, (int(ended.sum()), 2))
        return self.observe(), {"agents": reward}, np.zeros(self.num_envs, np.float32), ended.astype(np.float32)


class Staggered(msrl.Environment):
    """Two agents; environment ``i``'s episodes last ``2 + i`` steps, so episodes begin at different
    steps in different environments.  Observations are noise and the step's phase; rewards noise."""

    groups = {"agents": AgentGroup("agents", 2, Box(-1.0, 1.0, (3,)), Discrete(3))}
    num_agents = 2

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.num_envs, self.rng = num_envs, np.random.default_rng(seed)
        self.observation_space = {"agents": self.groups["agents"].observation_space}  # type: ignore[assignment]
        self.action_space = {"agents": self.groups["agents"].action_space}  # type: ignore[assignment]
        self.t, self.length = np.zeros(num_envs, np.int64), 2 + np.arange(num_envs)

    def reset(self, seed: int | None = None) -> Batched:
        self.t[:] = 0
        return self.observe()

    def observe(self) -> Batched:
        obs = self.rng.uniform(-1.0, 1.0, (self.num_envs, 2, 3)).astype(np.float32)
        obs[:, :, 2] = (self.t / self.length)[:, None]
        return {"agents": obs}

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        reward = self.rng.normal(size=(self.num_envs, 2)).astype(np.float32)
        self.t += 1
        ended = self.t >= self.length
        self.t[ended] = 0
        return self.observe(), {"agents": reward}, ended.astype(np.float32), np.zeros(self.num_envs, np.float32)


msrl.envs.register("Cue-v0", "numpy", Cue)
msrl.envs.register("Staggered-v0", "numpy", Staggered)


def by_env(batch: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """The buffer's ``"group/field"`` rows, in (environment, step) order, as ``(envs, steps, ...)``."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in batch.items():
        group, _, field = key.rpartition("/")
        out.setdefault(group, {})[field] = value.reshape((ENVS, STEPS) + value.shape[1:])
    return out


def rollout(
    chunk_length: int, env_id: str = "Leaver-v0"
) -> tuple[MAPPO, dict[str, dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """The second iteration's batch of a recurrent MAPPO, and the learner's weights it was
    collected with."""
    settings = {"recurrent": True, "num_envs": ENVS, "num_steps": STEPS, "chunk_length": chunk_length}
    if env_id == "Leaver-v0":
        algo = algorithm(**settings)
    else:
        config = MAPPOConfig(env_id=env_id, update_epochs=2, hidden_size=16, **settings)  # type: ignore[arg-type]
        algo = MAPPO(config, RunInfo(seed=4, total_env_steps=10 * ENVS * STEPS))
    algo.train_step()
    weights = copy.deepcopy(algo.learner.agents.state_dict())
    return algo, by_env(captured_batch(algo)), weights


@pytest.mark.parametrize("chunk_length", [4, 100])
def test_the_learner_replays_what_the_actors_did(chunk_length: int) -> None:
    """From the stored memories the learner's replay gives every step the log-probability and the
    value the actor had, whether a chunk restarts mid-rollout (4) or the replay runs through the
    rollout from its first memory (100), across the episode that begins at step 3."""
    algo, data, weights = rollout(chunk_length)
    assert torch.equal(data["agents"]["first"][:, :, 0], torch.tensor([0.0, 0, 0, 1, 0, 0, 0, 0, 0]).expand(ENVS, -1))
    algo.learner.agents.load_state_dict(weights)  # the weights before this batch's update
    with torch.no_grad():
        params, predictions = algo.learner.forward(data)
        values = algo.learner.agents.denormalize(predictions)["agents"]
    b = data["agents"]
    logprobs = algo.learner.agents.head("agents").log_prob(params["agents"], b["actions"])
    torch.testing.assert_close(logprobs, b["logprobs"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, b["values"], atol=1e-5, rtol=1e-5)


def test_memories_are_blank_where_episodes_begin_and_carried_elsewhere() -> None:
    _, data, _ = rollout(10)
    memory, first = data["agents"]["memory"], data["agents"]["first"] > 0
    assert first.any() and (~first).any()
    assert torch.equal(memory[first], torch.zeros_like(memory[first]))
    assert (memory[~first].abs().amax(dim=(-2, -1)) > 1e-3).all()  # every agent's GRU states moved


def test_the_actors_memory_survives_a_checkpoint() -> None:
    """A copy loaded from the actor's checkpoint acts as the actor would, memory and all; without
    the memory it would not."""
    algo = algorithm(recurrent=True, num_envs=ENVS, num_steps=STEPS)
    algo.train_step()
    copy_ = algorithm(recurrent=True, num_envs=ENVS, num_steps=STEPS)
    copy_.actor.load_state_dict(copy.deepcopy(algo.actor.state_dict()))
    blank = algorithm(recurrent=True, num_envs=ENVS, num_steps=STEPS)
    blank.actor.load_state_dict({**copy.deepcopy(algo.actor.state_dict()), "memory": None})
    obs = {"agents": torch.rand(ENVS, 2, 3)}
    original, restored, forgotten = (a.actor.act(obs) for a in (algo, copy_, blank))
    for mine, theirs in zip(original, restored):
        torch.testing.assert_close(theirs, mine)
    assert not torch.allclose(forgotten[2]["agents"], original[2]["agents"])


@pytest.mark.parametrize("chunk_length", [3, 100])
def test_the_replay_restarts_each_environment_where_its_own_episodes_begin(chunk_length: int) -> None:
    """Environment i's episodes last 2 + i steps: memories are blank exactly at each one's own
    episode starts, and the replay matches the actors step for step."""
    algo, data, weights = rollout(chunk_length, "Staggered-v0")
    first, memory = data["agents"]["first"][:, :, 0], data["agents"]["memory"]
    lengths = 2 + torch.arange(ENVS)[:, None]
    expected = ((STEPS + torch.arange(STEPS)[None, :]) % lengths == 0).float()  # the second rollout's steps
    assert torch.equal(first, expected) and not torch.equal(first[0], first[1])
    assert torch.equal(memory[first > 0], torch.zeros_like(memory[first > 0]))
    algo.learner.agents.load_state_dict(weights)
    with torch.no_grad():
        params, predictions = algo.learner.forward(data)
    b = data["agents"]
    logprobs = algo.learner.agents.head("agents").log_prob(params["agents"], b["actions"])
    torch.testing.assert_close(logprobs, b["logprobs"], atol=1e-5, rtol=1e-5)
    values = algo.learner.agents.denormalize(predictions)["agents"]
    torch.testing.assert_close(values, b["values"], atol=1e-5, rtol=1e-5)


def greedy_return(algo: MAPPO, episodes: int = 200) -> float:
    env = Cue(episodes, seed=5)
    obs, total = env.reset(seed=5), 0.0
    algo.actor.reset_greedy()
    for _ in range(2):
        actions = algo.actor.greedy(obs)
        obs, rewards, _, _ = env.step({g: np.asarray(a) for g, a in actions.items()})
        total += float(rewards["agents"].mean())
    return total


@pytest.mark.landing  # trains two policies, about 30 s: CI's tier after the default suite (6-minute budget)
def test_a_recurrent_policy_remembers_what_a_feed_forward_one_cannot() -> None:
    """On Cue the recurrent policies learn to name the cue they saw a step before (seed 1: 1.0
    within 40 iterations); the feed-forward ones stay at a guess (0.47)."""

    def trained(recurrent: bool) -> MAPPO:
        settings = {"num_envs": 16, "num_steps": 8, "update_epochs": 4, "hidden_size": 16, "chunk_length": 4}
        config = MAPPOConfig(env_id="Cue-v0", learning_rate=3e-3, recurrent=recurrent, **settings)
        algo = MAPPO(config, RunInfo(seed=1, total_env_steps=16 * 8 * 40))
        for _ in range(40):
            algo.train_step()
        return algo

    assert greedy_return(trained(recurrent=True)) >= 0.95
    assert greedy_return(trained(recurrent=False)) <= 0.6


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"chunk_length": 0}, "algo.chunk_length must be >= 1, got 0"),
        ({"num_envs": 6, "num_minibatches": 4, "num_steps": 2}, "must divide num_envs (6) with algo.recurrent"),
    ],
)
def test_a_bad_recurrent_setting_is_refused(setting: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MAPPOConfig(recurrent=True, **setting).validate()
