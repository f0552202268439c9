"""The ``Algorithm`` base class and ``RunInfo``, what an algorithm is told about its run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from msrl.core._build import Declared, wanted
from msrl.core._components import Component


@dataclass(frozen=True)
class RunInfo:
    """What an algorithm is told about the run, decided outside it.

    msrl builds an algorithm once for every copy of every fragment, each time
    with that copy's ``RunInfo`` (and its share of the config's per-run
    quantities, see ``msrl.split``).  The algorithm never learns how many copies
    there are; it only uses these numbers:

    * ``seed``: the run's seed, the same in every copy.  Use it for what copies
      must agree on, such as initial weights (replicated learners start equal).
    * ``data_seed``: this copy's own random stream, for what copies must not
      share: environment resets, action sampling.  It is ``seed`` itself in the
      ``local`` policy and in the first copy of any fragment.
    * ``total_env_steps``: this copy's share of the run's environment steps,
      divided like any per-run quantity, so a schedule over training that divides
      it by this copy's batch (PPO's learning-rate annealing) counts the run's
      iterations under every policy.
    * ``device``: the torch device of the fragment's executor.
    """

    seed: int = 0
    data_seed: int = 0
    total_env_steps: int = 0
    device: str = "cpu"

    @classmethod
    def for_copy(cls, seed: int, total_env_steps: int, copy: int, copies: int, device: str = "cpu") -> RunInfo:
        """The ``RunInfo`` of copy ``copy`` (from 0) of a fragment with ``copies`` copies.
        Copy 0 gets the run's seed as its data seed, so one copy reproduces ``local``."""
        return cls(
            seed=seed,
            data_seed=seed + 1_000_003 * copy,
            total_env_steps=max(1, total_env_steps // copies),
            device=device,
        )


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
                self.env = msrl.envs.make("CartPole-v1", config.num_envs, seed=run.data_seed)
                self.actor = RandomActor()

            def train_step(self):
                obs = self.env.observe()
                for _ in msrl.steps(self.config.num_steps):
                    obs, reward, terminated, truncated = self.env.step(self.actor.act(obs))
                return {}
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type]

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
