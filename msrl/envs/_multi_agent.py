"""``MultiAgentEnv``: ``BatchedEnv`` with an agent axis and agent groups.

A multi-agent environment is batched over environments *and* agents.  Its
agents are split into groups (Tag: ``taggers`` and ``runners``), each with its
own per-agent spaces (``msrl.AgentGroup``).  Everything ``BatchedEnv`` does
once for every environment is reused unchanged: the physical state is still
one row of ``state_dim`` numbers per environment (a subclass packs its agents'
positions, speeds... into the row), so the time limit, same-step autoreset,
seeding, ``get_state``/``set_state`` and checkpoints are the single-agent ones.
What changes is the shape of what a step takes and gives:

* ``observe()``/``reset()``: ``{group: (num_envs, n_group, *obs_shape)}`` float32.
* ``step(actions)`` with ``actions = {group: (num_envs, n_group)}`` (``Discrete``)
  or ``(num_envs, n_group, *shape)`` (``Box``) returns ``(obs, rewards,
  terminated, truncated)``: ``rewards = {group: (num_envs, n_group)}`` float32,
  the flags per environment ``(num_envs,)`` (an agent that leaves the game early,
  like a tagged runner, stays in the batch with reward 0; the environment says
  how it observes it).
* ``metrics()``: ``episode_return`` (mean over all agents of each agent's
  episode return), ``episode_return/<group>`` (the same over the group's
  agents), ``episode_length``, ``episodes``.

A subclass declares ``env_id``, ``max_episode_steps``, ``state_dim`` (usually
from its constants, as an instance attribute set before ``super().__init__``),
``agent_groups()`` and ``physics`` per backend, whose methods take and fill the
dicts: ``write_obs(state, out: {group: array})`` and ``step(state, actions:
{group: array}, rewards: {group: array}, terminated)``.
"""

from __future__ import annotations

from typing import Any

from msrl.core import AgentGroup, Batched, ConfigError, EnvError, Space
from msrl.envs._actions import ActionCheck
from msrl.envs._arrays import Array
from msrl.envs._base import BatchedEnv
from msrl.envs._episodes import GroupEpisodes
from msrl.envs._kernels import Kernels, MultiAgentKernelDynamics


class GroupActionCheck:
    """Checks ``{group: actions}``: every group present, each of shape ``(num_envs, n_group, ...)``
    and valid for the group's space (``ActionCheck`` on the flattened batch); returns the checked
    actions reshaped back to ``(num_envs, n_group, ...)``, in the backend's memory."""

    def __init__(self, env_id: str, groups: dict[str, AgentGroup], num_envs: int, arrays: Any, exact: bool) -> None:
        self.env_id, self.num_envs, self.arrays = env_id, num_envs, arrays
        self.groups = groups
        self.checks = {
            name: ActionCheck(f"{env_id} group {name!r}", g.action_space, num_envs * g.num_agents, arrays, exact=exact)
            for name, g in groups.items()
        }
        self.shapes = {
            name: (num_envs, g.num_agents, *tuple(getattr(g.action_space, "shape", ()) or ()))
            for name, g in groups.items()
        }

    def __call__(self, actions: Any) -> dict[str, Array]:
        if not isinstance(actions, dict):
            raise EnvError(
                f"{self.env_id} takes a dict of actions keyed by group ({', '.join(self.groups)}), "
                f"got {type(actions).__name__}"
            )
        if set(actions) != set(self.groups):
            raise EnvError(f"{self.env_id} takes actions for groups {sorted(self.groups)}, got {sorted(actions)}")
        out = {}
        for name, check in self.checks.items():
            action = self.arrays.asarray(actions[name]) if not hasattr(actions[name], "shape") else actions[name]
            shape = tuple(action.shape)
            expected = self.shapes[name]
            if shape != expected and not (shape == expected[:2] and expected[2:] == (1,)):
                raise EnvError(f"{self.env_id} group {name!r} expects actions of shape {expected}, got {shape}")
            n = expected[0] * expected[1]
            flat = check(action.reshape(n, *shape[2:]))
            out[name] = flat.reshape(expected[0], expected[1], *tuple(flat.shape[1:]))
        return out


class MultiAgentEnv(BatchedEnv):
    """A batch of ``num_envs`` copies of a multi-agent environment on one array backend."""

    def __init__(self, num_envs: int, seed: int = 0, **options: Any) -> None:
        groups = self.agent_groups()
        if not groups or not all(isinstance(g, AgentGroup) for g in groups.values()):
            raise ConfigError(f"{type(self).__name__}.agent_groups() must give at least one msrl.AgentGroup")
        for name, group in groups.items():
            if not isinstance(group.num_agents, int) or group.num_agents < 1:
                raise ConfigError(f"{self.env_id} group {name!r} needs at least one agent, got {group.num_agents!r}")
        self.groups: dict[str, AgentGroup] = dict(groups)
        self.num_agents = sum(g.num_agents for g in groups.values())
        super().__init__(num_envs, seed, **options)
        sizes = {name: g.num_agents for name, g in self.groups.items()}
        self._group_episodes = GroupEpisodes(self.arrays, self.num_envs, sizes, overall=self._episodes)
        self._obs_shapes = {name: tuple(getattr(g.observation_space, "shape", ())) for name, g in self.groups.items()}

    def _kernel_dynamics(self, kernels: Kernels, seed: int) -> MultiAgentKernelDynamics:
        return MultiAgentKernelDynamics(self, kernels, seed)

    def _action_check(self) -> GroupActionCheck:
        return GroupActionCheck(self.env_id, self.groups, self.num_envs, self.arrays, self.dynamics.exact_actions)

    def agent_groups(self) -> dict[str, AgentGroup]:
        """Group name -> ``AgentGroup``; read from the instance's constants."""
        raise NotImplementedError

    def spaces(self) -> tuple[dict[str, Space], dict[str, Space]]:
        return (
            {name: g.observation_space for name, g in self.groups.items()},
            {name: g.action_space for name, g in self.groups.items()},
        )

    # -- Environment API ---------------------------------------------------------
    def _obs_buffers(self) -> dict[str, Array]:
        # empty, not zeros: the physics writes every observation (as BatchedEnv's step_outputs)
        return {
            name: self.arrays.empty((self.num_envs, self.groups[name].num_agents, *shape), "float32")
            for name, shape in self._obs_shapes.items()
        }

    def observe(self) -> Batched:
        obs = self._obs_buffers()
        self.dynamics.observe(self._state, obs)
        return obs

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        """Advance every environment one step; finished ones restart in the same step."""
        checked = self._check_action(action)
        obs = self._obs_buffers()
        rewards = {name: self.arrays.empty((self.num_envs, g.num_agents), "float32") for name, g in self.groups.items()}
        terminated = self.arrays.empty((self.num_envs,), "float32")
        truncated = self.arrays.empty((self.num_envs,), "float32")
        with self._stepping():
            self._state = self.dynamics.step(
                self._state, self._group_episodes, checked, obs, rewards, terminated, truncated
            )
        return obs, rewards, terminated, truncated

    def _discard_episodes(self, mask: Array | None = None) -> None:
        self._group_episodes.discard(mask)

    # -- Component API ----------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self._group_episodes.metrics()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["group_episodes"] = self._group_episodes.group_state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        owner = type(self).__name__
        self._group_episodes.check_group_state(state.get("group_episodes"), owner)  # before anything changes
        super().load_state_dict(state)
        self._group_episodes.load_group_state_dict(state["group_episodes"], owner)

    def __repr__(self) -> str:
        groups = ", ".join(f"{name}={g.num_agents}" for name, g in self.groups.items())
        return f"{type(self).__name__}(num_envs={self.num_envs}, {groups}, {self.dynamics.name} on {self.device})"


__all__ = ["GroupActionCheck", "MultiAgentEnv"]
