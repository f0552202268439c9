"""Any PettingZoo parallel environment as an msrl multi-agent environment.

``msrl.envs.make("pettingzoo:<module>", num_envs)`` imports ``<module>`` (for
example ``mpe2.simple_tag_v3``) and builds ``num_envs`` copies of its
``parallel_env(**kwargs)``, stepped one after the other in Python: slow, but any
PettingZoo parallel environment works.  ``PettingZooEnv`` gives them the
contract of ``msrl.envs.MultiAgentEnv``:

* Groups from the agent names, PettingZoo's ``<type>_<index>`` convention:
  ``adversary_0, adversary_1, agent_0`` make groups ``adversary`` (2 agents) and
  ``agent`` (1), in the order of ``possible_agents``; a name without an index
  is a group of its own.  Agents of one group must share their spaces (else a
  ``ConfigError`` naming them); ``Box`` and ``Discrete`` spaces only.
* Values are dicts keyed by group, ``(num_envs, n_group, ...)``: float32
  observations (int64 indices for ``Discrete`` ones), float32 rewards, and
  per-environment 0/1 ``terminated``/``truncated``.
* ``Box`` actions are clipped to their space's bounds before PettingZoo sees them,
  as the gymnasium adapter clips them: a Gaussian policy's samples then are legal
  actions, and PettingZoo's "outside action space" warning never fires.
* Agents that leave before the end of an episode (a parallel env may drop
  agents) keep their slot: reward 0, observation zeros, their actions ignored.
* An episode ends when no agent is left playing; the environment then restarts
  in the same step (its ``obs`` is the next episode's first).  It is
  ``terminated`` when every agent terminated, otherwise ``truncated`` (every
  agent truncated, or a mix: some terminated before the others were cut off).
* ``metrics()`` like ``MultiAgentEnv``: ``episode_return`` (mean over agents),
  ``episode_return/<group>``, ``episode_length``, ``episodes``.
* Copy ``i`` is seeded ``seed + i``.  A checkpoint cannot hold the copies'
  Python objects, so ``state_dict`` keeps what the gymnasium adapter keeps
  (episode counts, seed, steps taken) and ``load_state_dict`` restarts every
  episode reproducibly from them: resume is exact only for msrl's own
  environments.

PettingZoo (and the module named) are imported when an environment is made,
never by ``import msrl.envs``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from msrl.core import AgentGroup, Batched, Box, CheckpointError, ConfigError, Discrete, Environment, Space
from msrl.envs._base import check_num_envs
from msrl.envs._episodes import GroupEpisodes
from msrl.envs._gymnasium import _msrl_space, _restart_seed
from msrl.envs._multi_agent import GroupActionCheck
from msrl.envs._numpy_arrays import NumpyArrays

PREFIX = "pettingzoo:"
_EXAMPLE = "e.g. pettingzoo:mpe2.simple_tag_v3"
_STATE_KEYS = ("episodes", "group_episodes", "seed", "steps")


def group_of(agent: Any) -> str:
    """The group of a PettingZoo agent name: ``"adversary_0"`` -> ``"adversary"``; a name
    without a ``_<index>`` suffix is its own group."""
    name = str(agent)
    head, sep, tail = name.rpartition("_")
    return head if sep and head and tail.isdigit() else name


def parallel_env_factory(module: str) -> Callable[..., Any]:
    """``module.parallel_env``, or a one-line ``ConfigError`` saying why not."""
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        hint = '; pip install "msrl[multiagent]"' if missing in ("mpe2", "pettingzoo") else ""
        raise ConfigError(
            f"{PREFIX}{module}: cannot import {module!r} ({exc}); name a module with a parallel_env, {_EXAMPLE}{hint}"
        ) from None
    factory = getattr(imported, "parallel_env", None)
    if not callable(factory):
        raise ConfigError(
            f"{PREFIX}{module}: module {module!r} has no parallel_env; name a PettingZoo environment module, {_EXAMPLE}"
        )
    return factory


class AgentLayout:
    """Where each PettingZoo agent sits in msrl's per-group arrays, and the conversions both
    ways: groups from the agent names of ``first`` (a parallel env), renamed by ``rename``,
    each checked to share ``Box``/``Discrete`` spaces (else a ``ConfigError`` naming them)."""

    def __init__(self, env_id: str, first: Any, rename: Mapping[str, str]) -> None:
        members: dict[str, list[Any]] = {}
        for agent in first.possible_agents:
            name = group_of(agent)
            members.setdefault(rename.get(name, name), []).append(agent)
        self.members = members
        self.groups: dict[str, AgentGroup] = {}
        self._obs_offset: dict[str, int] = {}
        self._action_offset: dict[str, int] = {}
        self._action_dtype: dict[str, Any] = {}
        for name, agents in members.items():
            lead = agents[0]
            obs_space, act_space = first.observation_space(lead), first.action_space(lead)
            for agent in agents[1:]:
                for what, space, other in (
                    ("observation", obs_space, first.observation_space(agent)),
                    ("action", act_space, first.action_space(agent)),
                ):
                    if other != space:
                        raise ConfigError(
                            f"{env_id}: agents {lead!r} and {agent!r} of group {name!r} have "
                            f"different {what} spaces ({space} and {other}); agents of one group "
                            f"must share spaces"
                        )
            self.groups[name] = AgentGroup(
                name,
                len(agents),
                _msrl_space(f"{env_id} agent {lead!r}", "observation", obs_space),
                _msrl_space(f"{env_id} agent {lead!r}", "action", act_space),
            )
            self._obs_offset[name] = int(getattr(obs_space, "start", 0))
            self._action_offset[name] = int(getattr(act_space, "start", 0))
            self._action_dtype[name] = np.dtype(act_space.dtype)
        self.num_agents = sum(len(agents) for agents in members.values())

    def new_obs(self, num_envs: int) -> dict[str, np.ndarray]:
        """Zeroed observations of ``num_envs`` copies, per group."""
        out: dict[str, np.ndarray] = {}
        for name, group in self.groups.items():
            space = group.observation_space
            if isinstance(space, Discrete):
                out[name] = np.zeros((num_envs, group.num_agents), np.int64)
            elif isinstance(space, Box):
                out[name] = np.zeros((num_envs, group.num_agents, *space.shape), np.float32)
        return out

    def write_obs(self, obs: dict[str, np.ndarray], i: int, observations: Mapping[Any, Any]) -> None:
        """Copy copy ``i``'s observations into its row of ``obs``; agents without one get zeros."""
        for name, agents in self.members.items():
            row = obs[name][i]
            discrete = isinstance(self.groups[name].observation_space, Discrete)
            for k, agent in enumerate(agents):
                if agent not in observations:
                    row[k] = 0
                elif discrete:
                    row[k] = int(observations[agent]) - self._obs_offset[name]
                else:
                    row[k] = np.asarray(observations[agent], dtype=np.float32).reshape(row[k].shape)

    def clip(self, actions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every ``Box`` group's actions within its space's bounds (one operation per group)."""
        out = dict(actions)
        for name, group in self.groups.items():
            space = group.action_space
            if isinstance(space, Box):
                out[name] = np.clip(actions[name], np.asarray(space.low), np.asarray(space.high))
        return out

    def to_pettingzoo(self, i: int, actions: dict[str, np.ndarray], live: Iterable[Any]) -> dict[Any, Any]:
        """Copy ``i``'s actions for the agents still playing, in PettingZoo's types."""
        out: dict[Any, Any] = {}
        playing = set(live)
        for name, agents in self.members.items():
            space = self.groups[name].action_space
            for k, agent in enumerate(agents):
                if agent not in playing:
                    continue
                value = actions[name][i, k]
                if isinstance(space, Discrete):
                    out[agent] = int(value) + self._action_offset[name]
                elif isinstance(space, Box):
                    out[agent] = np.asarray(value, dtype=self._action_dtype[name]).reshape(space.shape)
        return out


class PettingZooEnv(Environment):
    """``num_envs`` copies of a PettingZoo parallel environment, stepped in Python, with
    same-step autoreset (see the module docstring for the rules).

    ``env`` is a module name (its ``parallel_env(**kwargs)`` is called) or any callable
    returning a parallel environment.  ``group_names`` renames groups (``{"agent":
    "agents"}`` gives ``mpe2``'s simple_spread the group name of msrl's own).

    Example::

        >>> env = PettingZooEnv("mpe2.simple_tag_v3", num_envs=2, seed=0)
        >>> {name: g.num_agents for name, g in env.groups.items()}
        {'adversary': 3, 'agent': 1}
        >>> obs, rewards, terminated, truncated = env.step(
        ...     {"adversary": np.zeros((2, 3), np.int64), "agent": np.zeros((2, 1), np.int64)})
        >>> obs["adversary"].shape, rewards["agent"].shape
        ((2, 3, 16), (2, 1))
    """

    observation_space: dict[str, Space]  # type: ignore[assignment]  # a dict per group, by msrl.Environment's
    action_space: dict[str, Space]  # type: ignore[assignment]  # multi-agent contract (its annotation: one Space)

    def __init__(
        self,
        env: str | Callable[..., Any],
        num_envs: int,
        seed: int = 0,
        *,
        group_names: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        **kwargs: Any,
    ) -> None:
        self.env_id = f"{PREFIX}{env}" if isinstance(env, str) else getattr(env, "__name__", repr(env))
        self.num_envs = check_num_envs(num_envs)
        factory = parallel_env_factory(env) if isinstance(env, str) else env
        self._copies: list[Any] = []
        try:
            for _ in range(self.num_envs):
                self._copies.append(factory(**kwargs))
        except TypeError as exc:  # an argument the environment does not take
            self.close()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"{self.env_id} cannot be made with {kwargs}: {first}") from None
        try:
            self._layout = AgentLayout(self.env_id, self._copies[0], dict(group_names))
        except ConfigError:
            self.close()
            raise
        self.groups = self._layout.groups
        self.num_agents = self._layout.num_agents
        self.observation_space = {name: g.observation_space for name, g in self.groups.items()}
        self.action_space = {name: g.action_space for name, g in self.groups.items()}
        self._arrays = NumpyArrays()
        self._check_action = GroupActionCheck(self.env_id, self.groups, self.num_envs, self._arrays, exact=False)
        sizes = {name: g.num_agents for name, g in self.groups.items()}
        self._episodes = GroupEpisodes(self._arrays, self.num_envs, sizes)
        self._seed, self._steps = int(seed), 0
        self._obs = self._layout.new_obs(self.num_envs)
        self._ended: list[dict[Any, bool]] = [{} for _ in range(self.num_envs)]
        self._final: dict[int, dict[str, np.ndarray]] = {}  # copy -> its ended episode's last observations
        for i, copy in enumerate(self._copies):
            self._layout.write_obs(self._obs, i, copy.reset(seed=self._seed + i)[0])

    # -- Environment API ---------------------------------------------------------
    def reset(self, seed: int | None = None) -> Batched:
        """Start a new episode everywhere; ``reset(seed=s)`` equals a fresh env seeded ``s``."""
        if seed is not None:
            self._seed, self._steps = int(seed), 0
        self._restart(None if seed is None else self._seed)
        return self.observe()

    def _restart(self, seed: int | None) -> None:
        """Reset every copy (copy ``i`` seeded ``seed + i``) and forget the running episodes."""
        for i, copy in enumerate(self._copies):
            self._layout.write_obs(self._obs, i, copy.reset(seed=None if seed is None else seed + i)[0])
            self._ended[i].clear()
        self._final = {}
        self._episodes.discard()

    def observe(self) -> Batched:
        return {name: obs.copy() for name, obs in self._obs.items()}

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        """Advance every copy; finished ones restart in the same step."""
        checked = self._layout.clip(self._check_action(action))
        rewards = {name: np.zeros((self.num_envs, g.num_agents), np.float32) for name, g in self.groups.items()}
        terminated = np.zeros(self.num_envs, np.float32)
        truncated = np.zeros(self.num_envs, np.float32)
        self._final = {}
        for i, copy in enumerate(self._copies):
            obs, reward, term, trunc, _ = copy.step(self._layout.to_pettingzoo(i, checked, copy.agents))
            self._layout.write_obs(self._obs, i, obs)
            ended = self._ended[i]
            for name, agents in self._layout.members.items():
                for k, agent in enumerate(agents):
                    rewards[name][i, k] = reward.get(agent, 0.0)
                    if term.get(agent) or trunc.get(agent):
                        ended.setdefault(agent, bool(term.get(agent)))  # terminated wins over truncated
            still = [agent for agent in copy.agents if agent not in ended]
            if still:
                continue
            if all(ended.values()):
                terminated[i] = 1.0
            else:
                truncated[i] = 1.0
            self._final[i] = {name: part[i].copy() for name, part in self._obs.items()}
            self._layout.write_obs(self._obs, i, copy.reset()[0])
            ended.clear()
        self._episodes.record(rewards, self._arrays.finished_rows(terminated, truncated))
        self._steps += 1
        return self.observe(), rewards, terminated, truncated

    def final_obs(self) -> Batched:
        """``{group: observations}`` the last ``step`` ended in: its ``obs`` where an episode goes on,
        and where the step ended one (and restarted it), that episode's last observations, which a
        time-limited episode bootstraps from."""
        obs = self.observe()
        for i, last in self._final.items():
            for name, rows in last.items():
                obs[name][i] = rows
        return obs

    def active(self) -> Batched:
        """Which agents are in the game, for the latest observation: ``{group: (num_envs,
        n_group)}`` float32, 0 for an agent that ended before its episode did (and for one the
        copy does not list), 1 otherwise.  MAPPO's active masks read it."""
        out = {name: np.zeros((self.num_envs, g.num_agents), np.float32) for name, g in self.groups.items()}
        for i, copy in enumerate(self._copies):
            live = set(copy.agents).difference(self._ended[i])
            for name, agents in self._layout.members.items():
                out[name][i] = [agent in live for agent in agents]
        return out

    # -- Component API -------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self._episodes.metrics()

    def state_dict(self) -> dict[str, Any]:
        """Episode counts, the seed and the steps taken: all a PettingZoo env lets us keep."""
        return {
            "episodes": self._episodes.overall.state_dict(),
            "group_episodes": self._episodes.group_state_dict(),
            "seed": self._seed,
            "steps": self._steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the episode counts and restart every episode from a seed derived from the
        checkpoint's seed and step count: reproducible, but not the episodes that were
        running when it was taken (those are dropped, not counted)."""
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise CheckpointError(f"PettingZooEnv checkpoint lacks {missing}; expected keys {list(_STATE_KEYS)}")
        self._episodes.check_group_state(state["group_episodes"], "PettingZooEnv")
        self._episodes.overall.load_state_dict(state["episodes"])
        self._episodes.load_group_state_dict(state["group_episodes"], "PettingZooEnv")
        self._seed, self._steps = int(state["seed"]), int(state["steps"])
        self._restart(_restart_seed(self._seed, self._steps))

    def close(self) -> None:
        for copy in self._copies:
            copy.close()
        self._copies = []

    def __repr__(self) -> str:
        groups = ", ".join(f"{name}={g.num_agents}" for name, g in self.groups.items())
        return f"PettingZooEnv({self.env_id!r}, num_envs={self.num_envs}, {groups})"


__all__ = ["AgentLayout", "PettingZooEnv", "group_of", "parallel_env_factory"]
