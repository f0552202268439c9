"""The ``Algorithm`` base class and ``RunInfo``, what an algorithm is told about its run, with the
run's named random streams."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from msrl.core._build import Declared, EnvDefaults, wanted
from msrl.core._components import Component

if TYPE_CHECKING:  # imported where a generator is made: ``import msrl`` stays free of torch
    import torch

SEED_COPY_STRIDE = 1_000_003
"""Copy ``c`` of a fragment has the data seed ``seed + SEED_COPY_STRIDE * c``: a prime far above any
offset or index below, so no two copies' streams meet."""

SEED_INDEX_STRIDE = 7919
"""Sub-stream ``i`` of a stream (the ``i``-th of several networks, say) starts
``SEED_INDEX_STRIDE * i`` after the stream's first seed."""


@dataclass(frozen=True)
class SeedStream:
    """Where a named random stream of a run starts: at the run's seed (``per_copy=False``, every
    copy of a fragment draws the same numbers) or at the copy's data seed (``per_copy=True``, each
    copy its own), plus ``offset``."""

    per_copy: bool
    offset: int


SEED_STREAMS: Mapping[str, SeedStream] = MappingProxyType(
    {
        # shared by every copy: what copies must agree on
        "weights": SeedStream(per_copy=False, offset=0),  # initial network weights: replicated learners start equal
        "learner": SeedStream(per_copy=False, offset=2),  # a learner's draws: minibatch order, SAC's sampled actions
        "dataset": SeedStream(per_copy=False, offset=3),  # a dataset's strata, each drawn the same in whichever copy
        "eval": SeedStream(per_copy=False, offset=7919),  # the final evaluation's environments, apart from training's
        # one per copy: what copies must not share
        "env": SeedStream(per_copy=True, offset=0),  # environment resets
        "actor": SeedStream(per_copy=True, offset=1),  # action sampling and exploration
        "replay": SeedStream(per_copy=True, offset=2),  # replay-buffer sampling
    }
)
"""Every random stream of a run, by name: the one table of seed offsets (``RunInfo.seed_for``).
The offsets are fixed, so a run's recorded numbers reproduce; streams of one kind (shared or per
copy) differ in their offsets, and a stream that must be new gets a new name here rather than an
offset at its call site.  ("eval"'s offset, 7919, is also what sub-stream 1 of "weights" reaches:
one seeds environment resets, the other a network's initial weights.)"""


@dataclass(frozen=True)
class RunInfo:
    """What an algorithm is told about the run, decided outside it.

    msrl builds an algorithm once for every copy of every fragment, each time
    with that copy's ``RunInfo`` (and its share of the config's per-run
    quantities, see ``msrl.split``).  The algorithm never learns how many copies
    there are; it only uses these numbers:

    * ``seed``: the run's seed, the same in every copy.
    * ``data_seed``: this copy's own seed.  It is ``seed`` itself in the
      ``local`` policy and in the first copy of any fragment, so one copy
      reproduces ``local``.
    * ``total_env_steps``: this copy's share of the run's environment steps,
      divided like any per-run quantity, so a schedule over training that divides
      it by this copy's batch (``num_updates``) counts the run's iterations under
      every policy.
    * ``device``: the torch device of the fragment's executor.
    * ``env_defaults``: how the fragment's executor wants its environments built
      (backend, device, threads); passed on to ``msrl.envs.make(...,
      defaults=run.env_defaults)``, so an environment follows whichever executor
      runs it without the algorithm naming one.
    * ``part``: which of the equal parts of every per-run quantity this copy holds,
      as ``(index, parts)``; an algorithm reads it through ``share_of``, for
      values indexed across the whole run (Ape-X's epsilon per environment), or hands
      it to a component that shares something out itself (a dataset's episodes).

    Random numbers come from named streams, not from offsets picked at each call
    site: ``seed_for("env")`` seeds the environments, ``rng("actor")`` is the
    generator an actor samples actions with.  ``RunInfo.STREAMS`` lists them and
    says which are shared by every copy (initial weights) and which are each
    copy's own (resets, actions, replay sampling).

    Example::

        run = RunInfo(seed=1, total_env_steps=10_000)
        env = msrl.envs.make("CartPole-v1", 8, seed=run.seed_for("env"), defaults=run.env_defaults)
        generator = run.rng("actor")  # a torch.Generator on run.device
        run.num_updates(8 * 128)  # 10 updates of 1024 env steps (the last one short)
    """

    seed: int = 0
    data_seed: int = 0
    total_env_steps: int = 0
    device: str = "cpu"
    env_defaults: EnvDefaults = EnvDefaults()
    part: tuple[int, int] = (0, 1)

    STREAMS: ClassVar[Mapping[str, SeedStream]] = SEED_STREAMS
    """The named streams (``SEED_STREAMS``), where users of ``RunInfo`` find them."""

    @classmethod
    def for_copy(
        cls,
        seed: int,
        total_env_steps: int,
        copy: int,
        copies: int,
        device: str = "cpu",
        env_defaults: EnvDefaults | None = None,
    ) -> RunInfo:
        """The ``RunInfo`` of copy ``copy`` (from 0) of a fragment with ``copies`` copies.
        Copy 0 gets the run's seed as its data seed, so one copy reproduces ``local``."""
        return cls(
            seed=seed,
            data_seed=seed + SEED_COPY_STRIDE * copy,
            total_env_steps=max(1, total_env_steps // copies),
            device=device,
            env_defaults=EnvDefaults() if env_defaults is None else env_defaults,
            part=(copy, copies),
        )

    def share_of(self, count: int) -> tuple[range, int]:
        """Where this copy's ``count`` items of a per-run quantity (its share, as ``msrl.split``
        dealt it) sit among the whole run's: their indices, and how many the run has.  Under
        ``local``, ``(range(count), count)``; the second of two copies of a fragment sharing 8
        environments has 4, ``(range(4, 8), 8)``.  For values that depend on an item's place in the
        run, so that every distribution policy gives the run's items the same ones."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        index, parts = self.part
        return range(index * count, (index + 1) * count), count * parts

    def seed_for(self, stream: str, index: int = 0) -> int:
        """The seed of the named ``stream`` (a key of ``SEED_STREAMS``) in this copy; ``index``
        picks one of several sub-streams (the ``index``-th network of a run)."""
        spec = SEED_STREAMS.get(stream)
        if spec is None:
            raise ValueError(f"unknown seed stream {stream!r}; the streams are: {', '.join(SEED_STREAMS)}")
        if index < 0:
            raise ValueError(f"seed stream index must be >= 0, got {index}")
        return (self.data_seed if spec.per_copy else self.seed) + spec.offset + SEED_INDEX_STRIDE * index

    def rng(self, stream: str, index: int = 0) -> torch.Generator:
        """A torch generator on this copy's device, seeded ``seed_for(stream, index)``: draws made
        with it stay where the data is."""
        import torch

        return torch.Generator(device=self.device).manual_seed(self.seed_for(stream, index))

    def num_updates(self, env_steps_per_update: int) -> int:
        """How many updates of ``env_steps_per_update`` environment steps this copy's share of the
        run makes (the last one may be short), at least 1: what a schedule over training (the
        linear learning-rate decay) counts towards."""
        if env_steps_per_update < 1:
            raise ValueError(f"env_steps_per_update must be >= 1, got {env_steps_per_update}")
        return max(1, -(-self.total_env_steps // env_steps_per_update))


class Algorithm:
    """An RL algorithm: components assigned in ``__init__`` and one ``train_step``.

    ``train_step`` only orchestrates: it calls component methods and passes
    their results along; msrl traces it into a dataflow graph and the
    distribution policy decides where each component runs.

    Example::

        class Random(msrl.Algorithm):
            name = "random"
            Config = RandomConfig

            def __init__(self, config, run):
                super().__init__(config, run)
                self.env = msrl.envs.make(
                    "CartPole-v1", config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults
                )
                self.actor = RandomActor()

            def train_step(self):
                obs = self.env.observe()
                for _ in msrl.steps(self.config.num_steps):
                    obs, reward, terminated, truncated = self.env.step(self.actor.act(obs))
                return {}
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type]
    _components: dict[str, Component | Declared]  # set first in __init__, through object.__setattr__

    def __init__(self, config: Any, run: RunInfo | None = None) -> None:
        object.__setattr__(self, "_components", {})
        self.config = config
        self.run = run or RunInfo()

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, (Component, Declared)):
            if "_components" not in self.__dict__:
                raise TypeError(
                    f"{type(self).__name__}.__init__ must call super().__init__(config, run) "
                    "before assigning components"
                )
            if isinstance(value, Declared) and wanted(name):
                value = value.build()  # a component of the fragment being built: constructed here, now
            self._components[name] = value
        elif name in self.__dict__.get("_components", {}):
            del self._components[name]
        object.__setattr__(self, name, value)

    def components(self) -> dict[str, Component | Declared]:
        """Components by attribute name, in the order they were assigned: built ones, and
        ``Declared`` records for those that belong to fragments built elsewhere."""
        return dict(self._components)

    def train_step(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define train_step()")
