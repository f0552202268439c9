"""MAPPO's and IPPO's actors: ``MultiAgentActor`` for feed-forward policies, and
``RecurrentMultiAgentActor`` for recurrent ones (rMAPPO), which remembers every agent's GRU states
from step to step and hands the buffer what each agent remembered before it acted, so the learner
replays the rollout from there."""

from __future__ import annotations

from typing import Any

import torch

from algorithms._agents import Agents
from msrl.core import Actor, Batched, NoValue, RunInfo
from msrl.rl import load_generator_state


class MultiAgentActor(Actor):
    """Acts for every agent with its own copy of the policies: ``act(obs) -> (actions,
    logprobs, values)``, each a dict per group of ``(num_envs, agents)`` tensors."""

    def __init__(self, agents: Agents, run: RunInfo) -> None:
        self.device = torch.device(run.device)
        self.agents = agents.to(self.device)
        self.generator = run.rng("actor")

    def _obs(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {g: torch.as_tensor(o, dtype=torch.float32, device=self.device) for g, o in obs.items()}

    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[Batched, Batched, Batched]:
        obs = self._obs(obs)
        actions, logprobs = {}, {}
        for g, o in obs.items():
            net = self.agents.net(g)
            actions[g], logprobs[g] = net.head.sample(net.policy(o), self.generator)
        return actions, logprobs, self.agents.values(obs)

    @torch.inference_mode()
    def value(self, obs: Any) -> Batched:
        return self.agents.values(self._obs(obs))

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return {g: self.agents.net(g).head.mode(self.agents.net(g).policy(o)) for g, o in self._obs(obs).items()}

    def set_weights(self, weights: dict[str, torch.Tensor]) -> NoValue:
        self.agents.load_state_dict(weights)

    def state_dict(self) -> dict[str, Any]:
        return {"agents": self.agents.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agents.load_state_dict(state["agents"])
        load_generator_state(self.generator, state["generator"])


class RecurrentMultiAgentActor(MultiAgentActor):
    """Acts for every agent with recurrent policies: ``act(obs) -> (actions, logprobs, values,
    memory)``, ``memory`` being each agent's ``(2, hidden)`` GRU states before this step, per group
    ``(num_envs, agents, 2, hidden)``.  ``forget(terminated, truncated)`` blanks the memories of the
    environments whose episode just ended, so the next episode starts from a blank one; it is in
    checkpoints, as the environments' state is.  ``greedy`` keeps a memory of its own, blank again
    after ``reset_greedy()`` (evaluation calls it before its episodes)."""

    def __init__(self, agents: Agents, run: RunInfo) -> None:
        super().__init__(agents, run)
        self.memory: dict[str, torch.Tensor] | None = None
        self.greedy_memory: dict[str, torch.Tensor] | None = None

    def _fit(self, memory: dict[str, torch.Tensor] | None, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``memory``, or blank memories where there is none for these environments yet."""
        if memory is None or any(memory[g].shape[:2] != o.shape[:2] for g, o in obs.items()):
            return self.agents.blank_memory(obs)
        return memory

    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[Batched, Batched, Batched, Batched]:  # type: ignore[override]
        obs = self._obs(obs)
        memory = self._fit(self.memory, obs)
        params, predictions, self.memory = self.agents.step(obs, memory)
        actions, logprobs = {}, {}
        for g, p in params.items():
            actions[g], logprobs[g] = self.agents.head(g).sample(p, self.generator)
        return actions, logprobs, self.agents.denormalize(predictions), memory

    @torch.inference_mode()
    def forget(self, terminated: Any, truncated: Any) -> NoValue:
        if self.memory is None:
            return
        ended = torch.maximum(torch.as_tensor(terminated), torch.as_tensor(truncated)).to(self.device, torch.float32)
        keep = (1.0 - ended).reshape(-1, 1, 1, 1)
        self.memory = {g: m * keep for g, m in self.memory.items()}

    @torch.inference_mode()
    def value(self, obs: Any) -> Batched:
        obs = self._obs(obs)
        _, predictions, _ = self.agents.step(obs, self._fit(self.memory, obs))
        return self.agents.denormalize(predictions)

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        obs = self._obs(obs)
        params, _, self.greedy_memory = self.agents.step(obs, self._fit(self.greedy_memory, obs))
        return {g: self.agents.head(g).mode(p) for g, p in params.items()}

    def reset_greedy(self) -> None:
        self.greedy_memory = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "memory": self.memory}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.memory = state.get("memory")
