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
from typing import Any, Tuple

from msrl._spaces import Box, Discrete, Space


class _Kind:
    """Marker used in return annotations: ``-> Batched`` or ``-> tuple[Batched, Global]``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __getitem__(self, item: Any) -> "_Kind":  # allows Batched[np.ndarray] in hints
        return self


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
    """

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

    def metrics(self) -> dict[str, float]:
        return {}


# Methods that the runtime (not train_step) calls, so tracing never sees them.
_UNGUARDED = {"state_dict", "load_state_dict", "metrics"}


class Environment(Component):
    """A batch of ``num_envs`` environments stepped together (always vectorised).

    ``step`` resets finished environments automatically: the observation it
    returns for an environment whose episode just ended is the first one of its
    next episode (the same-step autoreset of SB3's VecEnv).  ``terminated`` and
    ``truncated`` are float arrays of 0/1 so they can be fed to maths directly.
    """

    num_envs: int
    num_agents: int = 1
    observation_space: Space
    action_space: Space

    def reset(self, seed: int | None = None) -> Batched:
        """Reset every environment and return the batch of first observations."""
        raise NotImplementedError

    def observe(self) -> Batched:
        """The latest observation of every environment, without stepping."""
        raise NotImplementedError

    def step(self, action: Any) -> Tuple[Batched, Batched, Batched, Batched]:
        """Advance every environment: ``(obs, reward, terminated, truncated)``."""
        raise NotImplementedError


class Actor(Component):
    """Policy inference: observations in, actions (and what the learner needs) out."""

    def act(self, obs: Any) -> Batched:
        raise NotImplementedError

    def greedy(self, obs: Any) -> Batched:
        """The most likely action, for evaluation."""
        raise NotImplementedError(f"{type(self).__name__} does not implement greedy(), so it cannot be evaluated")

    def set_weights(self, weights: Any) -> NoValue:
        raise NotImplementedError


class Buffer(Component):
    """Trajectory or replay storage."""

    def insert(self, *values: Any) -> NoValue:
        raise NotImplementedError


class Learner(Component):
    """Loss, gradients and optimiser.

    Gradient synchronisation across learner replicas is switched on by the
    distribution policy through ``grad_sync``: a learner calls ``self.sync_grads(params)``
    after ``backward()`` and before the optimiser step, and never calls a
    collective itself.  With one replica the hook does nothing.

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


_UNGUARDED.add("sync_grads")

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
