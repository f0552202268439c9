"""The ``Algorithm`` base class and the lookup of algorithms by name."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

from msrl._components import Component
from msrl._errors import ConfigError


@dataclass(frozen=True)
class RunInfo:
    """Facts about the run an algorithm is built for, decided outside it.

    ``replica``/``num_replicas`` let a replicated component pick distinct
    seeds; ``device`` is the torch device its fragment's executor runs on.
    """

    seed: int = 0
    total_env_steps: int = 0
    replica: int = 0
    num_replicas: int = 1
    device: str = "cpu"

    @property
    def replica_seed(self) -> int:
        """A seed distinct per replica and reproducible per run."""
        return self.seed + 1_000_003 * self.replica


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
                self.env = msrl.envs.make("CartPole-v1", config.num_envs, run.seed)
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
        if isinstance(value, Component):
            if "_components" not in self.__dict__:
                raise TypeError(f"{type(self).__name__}.__init__ must call super().__init__(config, run) before assigning components")
            self._components[name] = value
        elif name in self.__dict__.get("_components", {}):
            del self._components[name]
        object.__setattr__(self, name, value)

    def components(self) -> dict[str, Component]:
        """Declared components by attribute name, in the order they were assigned."""
        return dict(self._components)

    def train_step(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define train_step()")


# Built-in algorithms, imported on first use so `import msrl` stays light.
_BUILTIN = {"ppo": "algorithms.ppo:PPO"}


def algorithm_names() -> list[str]:
    return sorted(_BUILTIN)


def get_algorithm(name: str) -> type[Algorithm]:
    """A built-in algorithm by name, or a user's as ``package.module:ClassName``."""
    spec = _BUILTIN.get(name, name)
    if ":" not in spec:
        raise ConfigError(f"unknown algorithm {name!r}; valid choices: {', '.join(algorithm_names())} or 'module:Class'")
    module_name, _, class_name = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load algorithm {name!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"algorithm {name!r} is not an msrl.Algorithm subclass")
    if not dataclasses.is_dataclass(getattr(cls, "Config", None)):
        raise ConfigError(f"algorithm {name!r} has no Config dataclass")
    return cls
