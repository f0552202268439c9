"""msrl's closed vocabularies: node ops, interface ops, component roles and value kinds.

Each is a ``str``-valued enum, so a member compares, hashes, formats and
serialises (YAML, JSON, pickles across Ray) as its plain string, while a typo
is an error where the value is made instead of a comparison that is silently
false.  Text from outside (a config's ``components: [env, actor]``, a node
built by hand) becomes a member through ``parse``, which names the valid
choices when it does not match; inside msrl only members are compared.

Example::

    >>> Role.parse("learner") is Role.LEARNER
    True
    >>> Op.parse("call_sth")
    Traceback (most recent call last):
    ...
    ValueError: unknown node op 'call_sth'; valid choices: call_component, call_function, output
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

_V = TypeVar("_V", bound="Vocabulary")


class Vocabulary(str, enum.Enum):
    """Base of the closed vocabularies: a member is its string everywhere text is wanted."""

    __noun__ = "value"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def parse(cls: type[_V], value: Any) -> _V:
        """The member spelled ``value`` (a member passes through); ``ValueError`` naming the valid ones."""
        if isinstance(value, cls):
            return value
        for member in cls:
            if isinstance(value, str) and member.value == value:
                return member
        raise ValueError(f"unknown {cls.__noun__} {value!r}; valid choices: {cls.choices()}")

    @classmethod
    def lookup(cls: type[_V], value: Any) -> _V | None:
        """The member spelled ``value``, or ``None`` when ``value`` is not one (for input that
        may name something else too, such as a policy entry that is a component name or a role)."""
        try:
            return cls.parse(value)
        except ValueError:
            return None

    @classmethod
    def choices(cls) -> str:
        """The valid spellings, comma-separated, for error messages."""
        return ", ".join(member.value for member in cls)


class Op(Vocabulary):
    """What a ``Node`` does (torch.fx's closed op set, reduced to what a ``train_step`` records)."""

    __noun__ = "node op"

    CALL_COMPONENT = "call_component"
    """``target`` is ``(component, method)``: a method call on a component (has side effects)."""
    CALL_FUNCTION = "call_function"
    """``target`` is a callable applied to traced values (indexing a returned tuple)."""
    OUTPUT = "output"
    """What ``train_step`` returns; always the last node."""


class InterfaceOp(Vocabulary):
    """How a value crosses a cut edge, from the replica counts on its two sides and its kind."""

    __noun__ = "interface op"

    P2P = "p2p"
    """Equal replica counts: replica i sends to replica i."""
    GATHER = "gather"
    """N -> 1, batched: concatenated along the batch axis in replica order."""
    SCATTER = "scatter"
    """1 -> N, batched: split along the batch axis (the inverse of a gather)."""
    BROADCAST = "broadcast"
    """1 -> N, global: every destination gets the whole value."""
    ALL_REDUCE = "allreduce"
    """Gradients averaged across the replicas of one learner fragment (no dataflow edge)."""


class Role(Vocabulary):
    """What part a component plays, from its base class; a distribution policy may name a role
    instead of a component (``components: [env, actor]``)."""

    __noun__ = "role"

    ENV = "env"
    ACTOR = "actor"
    BUFFER = "buffer"
    LEARNER = "learner"
    COMPONENT = "component"
    """A component that derives from none of the four role classes."""


class ValueKind(Vocabulary):
    """What a traced value holds, which decides how it crosses a cut edge (``InterfaceOp``)."""

    __noun__ = "value kind"

    BATCHED = "batched"
    """Leading axis over environments or agents: split and concatenated along it (scatter, gather)."""
    GLOBAL = "global"
    """One value for the whole run (weights, metrics): sent whole to every replica (broadcast)."""
