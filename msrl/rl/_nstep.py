"""n-step returns for a replay (Sutton 1988; Rainbow's multi-step targets): each environment's last
``n`` steps wait in a window, and a transition is stored once its window is full, as
``(obs_t, a_t, r_t + g r_{t+1} + ... + g^(n-1) r_{t+n-1}, obs_{t+n})``, to be bootstrapped with
``g^n``.  An episode that terminates within the window stores each waiting step with the rewards up
to its end, and no bootstrap (terminated).  A window cut by a time limit is dropped: bootstrapping it
would need ``g^k`` for its shorter span, where every stored transition is bootstrapped with ``g^n``.

With an actor's values (``q``: Q(obs_t, a_t) at each step; ``next_value``: its value of the step's
next observation) each stored transition also carries the ``q`` of its first step and the
``next_value`` of its last, from which the replay computes its TD error (Ape-X's initial priority)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch


class NStepTransitions(NamedTuple):
    """The transitions one ``NStepReturns.step`` completed, and the environment each came from
    (a frame replay shares each game's frames between its transitions); ``q`` and ``next_value``
    where the step was given an actor's values, else None."""

    obs: torch.Tensor
    actions: torch.Tensor
    returns: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    envs: torch.Tensor
    q: torch.Tensor | None = None
    next_value: torch.Tensor | None = None


class NStepReturns:
    """The windows of ``num_envs`` environments (sized at the first step): ``step`` takes one
    step of every environment and returns the n-step transitions it completes."""

    def __init__(self, n: int, gamma: float, device: torch.device) -> None:
        self.n, self.device = n, device
        self.powers = gamma ** torch.arange(n, dtype=torch.float64, device=device)
        self.obs: torch.Tensor | None = None
        self.actions = self.rewards = self.length = self.q = torch.zeros(0)

    def step(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        q: torch.Tensor | None = None,
        next_value: torch.Tensor | None = None,
    ) -> NStepTransitions:
        """The completed transitions, each with its environment's index, and with ``q`` and
        ``next_value`` given, each one's first ``q`` and last ``next_value``."""
        envs = torch.arange(obs.shape[0], device=self.device)
        if self.obs is None or self.obs.shape[1] != obs.shape[0]:
            self.obs = torch.zeros((self.n, *obs.shape), dtype=obs.dtype, device=self.device)
            self.actions = torch.zeros((self.n, *action.shape), dtype=action.dtype, device=self.device)
            self.rewards = torch.zeros((self.n, obs.shape[0]), dtype=torch.float64, device=self.device)
            self.length = torch.zeros(obs.shape[0], dtype=torch.int64, device=self.device)
            self.q = torch.zeros((self.n, obs.shape[0]), dtype=torch.float32, device=self.device)
        valued = next_value is not None
        if q is not None:
            self.q[self.length, envs] = q.to(torch.float32)
        self.obs[self.length, envs] = obs
        self.actions[self.length, envs] = action
        self.rewards[self.length, envs] = reward.to(torch.float64)
        self.length += 1
        ended = terminated > 0
        cut = (truncated > 0) & ~ended
        parts: list[tuple[torch.Tensor, ...]] = []
        full = ((self.length == self.n) & ~ended & ~cut).nonzero().squeeze(1)
        if full.numel():  # the oldest step of a full window: n rewards, bootstrapped from next_obs
            returns = (self.rewards[:, full] * self.powers[:, None]).sum(0)
            part = (self.obs[0, full], self.actions[0, full], returns, next_obs[full], torch.zeros_like(returns), full)
            parts.append(part + ((self.q[0, full], next_value[full]) if valued else ()))  # type: ignore[index]
            for window in (self.obs, self.actions, self.rewards, self.q):
                window[:, full] = window[:, full].roll(-1, 0)
            self.length[full] -= 1
        done = ended.nonzero().squeeze(1)
        slots = torch.arange(self.n, device=self.device)[:, None]
        for j in range(self.n):  # every step waiting in a terminated window, its rewards to the end
            rows = done[self.length[done] > j]
            if rows.numel() == 0:
                break
            span = (slots >= j) & (slots < self.length[rows][None, :])
            powers = self.powers[(slots - j).clamp(min=0)].expand(-1, rows.numel())
            returns = (self.rewards[:, rows] * torch.where(span, powers, 0.0)).sum(0)
            part = (self.obs[j, rows], self.actions[j, rows], returns, next_obs[rows], torch.ones_like(returns), rows)
            parts.append(part + ((self.q[j, rows], next_value[rows]) if valued else ()))  # type: ignore[index]
        self.length[ended | cut] = 0
        if not parts:
            empty = reward[:0].to(torch.float64)
            none = (obs[:0], action[:0], empty, next_obs[:0], empty, envs[:0])
            return NStepTransitions(*none, *((self.q[0, :0], self.q[0, :0]) if valued else ()))
        return NStepTransitions(*(torch.cat(column) for column in zip(*parts)))

    def state_dict(self) -> dict[str, Any]:
        if self.obs is None:
            return {}
        windows = {
            "obs": self.obs,
            "actions": self.actions,
            "rewards": self.rewards,
            "length": self.length,
            "q": self.q,
        }
        return {name: tensor.clone() for name, tensor in windows.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            self.obs = None
            return
        self.obs = state["obs"].to(self.device)
        self.actions = state["actions"].to(self.device)
        self.rewards = state["rewards"].to(self.device)
        self.length = state["length"].to(self.device)
        self.q = state["q"].to(self.device) if "q" in state else torch.zeros_like(self.rewards, dtype=torch.float32)
