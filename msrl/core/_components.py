"""Component base classes: the pieces an algorithm is written against.

An algorithm is a set of components (environment, actor, buffer, learner) and a
``train_step`` that only passes values between their methods.  The tracer turns
those calls into a dataflow graph; a distribution policy later decides where
each component lives.  Components therefore never talk to each other directly:
everything they exchange goes through method arguments and return values.

The return annotation of a public method says how many values it returns and
whether each is *batched* (leading axis = environments/agents, can be split
across replicas) or *global* (weights, metrics: one value for everybody).
Subclasses inherit the annotation of the base method they override, so user
code rarely has to annotate anything.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from msrl.core._build import Declared, declaring
from msrl.core._spaces import Box, Discrete, Space


class _Kind:
    """Marker used in return annotations: ``-> Batched`` or ``-> tuple[Batched, Global]``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __getitem__(self, item: Any) -> _Kind:  # allows Batched[np.ndarray] in hints
        return self


if TYPE_CHECKING:
    # For the type checker the markers are what the values are: anything, and None for NoValue.
    Batched: TypeAlias = Any
    Global: TypeAlias = Any
    NoValue: TypeAlias = None
else:
    Batched = _Kind("Batched")
    Global = _Kind("Global")
    NoValue = _Kind("NoValue")

# Set by the tracer while it runs; component methods consult it to reject calls
# on components the algorithm never declared (see Component.__init_subclass__).
_ACTIVE_TRACER: list[Any] = []


def _guard_undeclared(method):
    """Wrap a public component method so a call during tracing on an undeclared
    component raises instead of silently running real code."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if _ACTIVE_TRACER:
            _ACTIVE_TRACER[-1].on_untraced_component_call(self, method.__name__)
        return method(self, *args, **kwargs)

    guarded.__msrl_guarded__ = True
    return guarded


class Component:
    """Base of every component.

    ``state_dict``/``load_state_dict`` make checkpoints resume exactly: a component
    returns everything that changes while training (weights, optimiser state,
    random generators, environment state) as tensors and plain Python values,
    so the checkpoint loads with ``torch.load(weights_only=True)``.

    ``metrics`` is polled by the run loop once per iteration, outside the traced
    graph, for numbers that are not part of the data flow (episode returns).
    ``close`` releases what the component holds (threads, devices) when the run ends.

    While msrl builds one fragment of a run, constructing a component of another
    fragment gives a ``Declared`` record instead of an object (see ``msrl.core._build``).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if declaring():
            return Declared(cls, lambda: cls(*args, **kwargs), **_known_from_arguments(cls, args, kwargs))
        return super().__new__(cls)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if name.startswith("_") or not inspect.isfunction(value):
                continue
            if name in _UNGUARDED or getattr(value, "__msrl_guarded__", False):
                continue
            setattr(cls, name, _guard_undeclared(value))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} has no state but the checkpoint holds {sorted(state)}")

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """Load this component's share of a checkpoint taken with another number of replicas of its
        fragment (an elastic fragment that shrank or grew): ``states`` are the component's states in
        each replica the checkpoint holds, and this is replica ``replica`` of ``count``, built with
        its share of the per-run quantities and its own seeds.

        The default suits state every replica holds alike (weights, optimiser state): the same
        replica's state where the checkpoint has one, else replica 0's with this replica's own
        random generators (entries named as in ``OWN_STATE``), as built; counts of a replica's
        share of the work (``SHARED_COUNTS``) are summed over the checkpoint's replicas and shared
        out anew; what belongs to the episodes in progress (``EPISODE_STATE``) is left out, as the
        environments start new ones. Environments and buffers override it (``Environment``,
        ``Buffer``)."""
        state = dict(states[replica] if replica < len(states) else states[0])
        for key in EPISODE_STATE:
            state.pop(key, None)
        if replica >= len(states):
            own = self.state_dict()
            state.update({key: own[key] for key in OWN_STATE if key in state and key in own})
        for key in SHARED_COUNTS:
            if key in state:
                state[key] = sum(int(s[key]) for s in states) // count
        self.load_state_dict(state)

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        """Release threads, processes or devices; called once when the run ends."""


OWN_STATE = ("generator",)
"""State entries that belong to one replica (its random stream), never copied to another."""
EPISODE_STATE = ("memory",)
"""State entries that belong to the episodes in progress (a recurrent actor's memories), which a
component's ``load_state_dict`` must take as absent: blank, as at an episode's start."""
SHARED_COUNTS = ("env_steps",)
"""State entries counting one replica's share of the run's work (the steps an actor took, which
its exploration schedule follows)."""

# Methods that the runtime (not train_step) calls, so tracing never sees them.
_UNGUARDED = {"state_dict", "load_state_dict", "load_regrouped", "metrics", "close"}


def _known_from_arguments(cls: type, args: tuple, kwargs: dict) -> dict[str, Any]:
    """What a declared component's constructor arguments already tell: an environment's
    ``num_envs``, when its constructor takes one by that name (msrl checks that the copies of
    an environment share the run's environments, before anything is built)."""
    if not issubclass(cls, Environment):
        return {}
    try:
        bound = inspect.signature(cls).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    return {"num_envs": bound.arguments["num_envs"]} if "num_envs" in bound.arguments else {}


class Environment(Component):
    """A batch of ``num_envs`` environments stepped together (always vectorised).

    The contract every environment keeps (msrl's own, the gymnasium adapter, a
    user's):

    * ``num_envs``, ``observation_space`` and ``action_space`` (``Box`` or
      ``Discrete``, describing one environment); ``num_agents`` for multi-agent.
    * ``reset(seed=None) -> Batched`` and ``observe() -> Batched``: observations
      with a leading ``num_envs`` axis, float32 for ``Box`` spaces (a ``Box`` of dtype uint8,
      frames, keeps its uint8);
      ``reset(seed=s)`` repeats what a fresh environment seeded ``s`` does.
    * ``step(action) -> (obs, reward, terminated, truncated)``, all ``Batched``:
      actions of shape ``(num_envs,)`` (``Discrete``) or ``(num_envs, *shape)``
      (``Box``); float32 rewards, and ``terminated``/``truncated`` as float32 0/1
      so they feed maths directly.  Finished environments restart in the same
      step: the ``obs`` returned for one whose episode just ended is the first
      of its next episode (SB3's VecEnv autoreset).
    * ``metrics()`` (polled once per iteration) gives ``episode_return``,
      ``episode_length`` and ``episodes`` for the episodes finished since the
      last poll, or ``{}`` when none did.
    * ``state_dict``/``load_state_dict`` hold tensors and plain values only
      (``torch.load(weights_only=True)`` reads them); ``close()`` frees what
      the environment holds.

    A multi-agent environment also has ``groups`` (group name -> ``AgentGroup``;
    ``None`` for a single agent), ``num_agents`` is the agents of all groups per
    environment, and ``observation_space``/``action_space`` are dicts keyed by
    group.  Observations, actions and rewards are then dicts keyed by group, each
    ``(num_envs, group's num_agents, ...)``; ``terminated``/``truncated`` stay per
    environment ``(num_envs,)``.  ``metrics()`` adds ``episode_return/<group>``,
    the mean over the group's agents of their episode returns (``episode_return``
    is that mean over all agents).

    ``msrl.envs.BatchedEnv`` implements all of it around an environment's
    physics (``msrl.envs.MultiAgentEnv`` for several agents), and
    ``msrl.envs.register(env_id, backend, factory)`` makes an environment
    available to ``msrl.envs.make`` by name.
    """

    num_envs: int
    num_agents: int = 1
    groups: Any = None
    observation_space: Space
    action_space: Space

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """Environments start new episodes, as built with this replica's seeds, after their
        fragment changed its replica count: each replica now steps another number of them."""

    def reset(self, seed: int | None = None) -> Batched:
        """Reset every environment and return the batch of first observations."""
        raise NotImplementedError

    def observe(self) -> Batched:
        """The latest observation of every environment, without stepping."""
        raise NotImplementedError

    def step(self, action: Any) -> tuple[Batched, Batched, Batched, Batched]:
        """Advance every environment: ``(obs, reward, terminated, truncated)``."""
        raise NotImplementedError


class Actor(Component):
    """Policy inference: observations in, actions (and what the learner needs) out."""

    def act(self, obs: Any) -> Batched:
        raise NotImplementedError

    def greedy(self, obs: Any) -> Batched:
        """The most likely action, for evaluation."""
        raise NotImplementedError(f"{type(self).__name__} does not implement greedy(), so it cannot be evaluated")

    def reset_greedy(self) -> None:
        """Forget what ``greedy`` remembers from earlier calls (a recurrent policy's memory), so
        the next call starts fresh episodes; evaluation calls it first.  Nothing to forget here."""

    def set_weights(self, weights: Any) -> NoValue:
        raise NotImplementedError


class Buffer(Component):
    """Trajectory or replay storage."""

    def insert(self, *values: Any) -> NoValue:
        raise NotImplementedError

    def load_regrouped(self, states: Sequence[dict[str, Any]], replica: int, count: int) -> None:
        """A buffer starts empty, as built, after its fragment changed its replica count: what an
        on-policy buffer holds between iterations. A replay keeps its transitions only where it
        deals them out anew itself (``msrl.rl``'s replays do)."""


class Learner(Component):
    """Loss, gradients and optimiser.

    Gradient synchronisation across learner replicas is switched on by the
    distribution policy through ``grad_sync``: a learner hands ``self.gradient_sync`` to its
    ``msrl.rl.GradientStep`` (or calls ``self.sync_grads(params)`` after ``backward()`` and
    before the optimiser step), and never calls a collective itself.  With one replica the
    hook does nothing.

    ``learn`` returns its metrics; diagnostics that cost a pass over the batch
    can be returned as ``msrl.deferred(fn, ...)``, computed after the new
    weights have been sent (see ``msrl._deferred``).
    """

    grad_sync: Any = None

    def learn(self, batch: Any) -> Global:
        raise NotImplementedError

    def get_weights(self) -> Global:
        raise NotImplementedError

    def sync_grads(self, parameters: Any) -> None:
        if self.grad_sync is not None:
            self.grad_sync(parameters)

    @property
    def gradient_sync(self) -> Any:
        """``sync_mean`` where the distribution policy averages gradients over learner replicas,
        None where there is one: what a ``msrl.rl.GradientStep`` takes as its ``sync``."""
        return None if self.grad_sync is None else self.sync_mean

    def sync_mean(self, tensors: Any) -> None:
        """Average ``tensors`` in place over the learner replicas, like gradients: for statistics
        the replicas must agree on, each computed from the replica's share of the batch (the
        moments behind observation normalisation).  With one replica it does nothing."""
        if self.grad_sync is not None:
            self.grad_sync.mean_(list(tensors))


_UNGUARDED.update(("sync_grads", "sync_mean"))

__all__ = [
    "Actor",
    "Batched",
    "Box",
    "Buffer",
    "Component",
    "Discrete",
    "Environment",
    "Global",
    "Learner",
    "NoValue",
]
