"""A trained algorithm back from its checkpoint, in this process: ``load`` (ready
for greedy actions) and ``evaluate`` (greedy episodes on fresh environments)."""

from __future__ import annotations

import os
from typing import Any

import fragments
from msrl.app._checkpoint import load_checkpoint
from msrl.app._config import load_config
from msrl.app._evaluate import Evaluation, evaluate_algorithm
from msrl.app._plan import recipe_of
from msrl.core import Algorithm, CheckpointError, ConfigError, Role, role_of

LOADED_ROLES = (Role.ACTOR, Role.LEARNER)
"""What ``load`` restores.  Environments and buffers start fresh: their state is sized
for the replica that saved it (its share of the environments), not for this process."""


def load_components(recipe: fragments.BuildRecipe, states: dict[str, Any]) -> Algorithm:
    """The whole algorithm built in this process (every component, on the CPU and each
    environment's default backend) with the saved actors and learners loaded.  A state saved
    on a GPU loads too: its tensors are copied onto the CPU copies, and a CUDA generator's state
    seeds the CPU generator in its place (``msrl.rl.load_generator_state``)."""
    algorithm = recipe.algorithm(recipe.config, fragments.run_info(recipe, None, None))
    for name, component in algorithm.components().items():
        if role_of(component) in LOADED_ROLES:
            if not isinstance(states.get(name), dict) or (not states[name] and component.state_dict()):
                # evaluating the untrained network it would leave would report a result of nothing
                raise CheckpointError(
                    f"checkpoint has no state for {role_of(component)} {name!r} of "
                    f"{recipe.algorithm.__name__}; it cannot be evaluated or loaded"
                )
            try:
                component.load_state_dict(states[name])
            except (KeyError, RuntimeError, ValueError, TypeError) as exc:
                raise CheckpointError(
                    f"checkpoint state of {name!r} does not fit {recipe.algorithm.__name__}: "
                    f"{str(exc).splitlines()[0][:200]}"
                ) from exc
    return algorithm


def load(checkpoint: str | os.PathLike) -> Algorithm:
    """The algorithm of a checkpoint with its trained weights, built in this process.

    Example::

        ppo = msrl.load("runs/ppo_cartpole/checkpoint.pt")
        action = ppo.actor.greedy(obs)
    """
    payload = load_checkpoint(os.fspath(checkpoint))
    config = load_config(None, base=payload["config"])
    return load_components(recipe_of(config), payload["components"])


def evaluate(checkpoint: str | os.PathLike, episodes: int = 20, seed: int = 12345) -> Evaluation:
    """Greedy evaluation of a checkpoint: one episode in each of ``episodes`` fresh environments."""
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    return evaluate_algorithm(load(checkpoint), episodes, seed)
