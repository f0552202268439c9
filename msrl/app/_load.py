"""A trained algorithm back from its checkpoint, in this process: ``load`` (ready
for greedy actions) and ``evaluate`` (greedy episodes on fresh environments), and the one
evaluation procedure that ``msrl eval`` and a run's final evaluation share (``evaluate_states``)."""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

import fragments
from fragments.executors import threads_for
from msrl.app._checkpoint import load_checkpoint
from msrl.app._config import LoadedConfig, load_config
from msrl.app._evaluate import Evaluation, evaluate_algorithm, torch_threads
from msrl.app._plan import recipe_of
from msrl.core import Algorithm, CheckpointError, ConfigError, Role, RunInfo, building, role_of
from policies import DistributionPolicy, load_policy

LOADED_ROLES = (Role.ACTOR, Role.LEARNER)
"""What ``load`` restores.  Environments and buffers start fresh: their state is sized
for the replica that saved it (its share of the environments), not for this process."""
EVAL_EPISODES = 20
"""Greedy episodes of ``msrl eval`` for a run whose config asks for no final evaluation."""


def load_components(
    recipe: fragments.BuildRecipe, states: dict[str, Any], only: Collection[Role] | None = None
) -> Algorithm:
    """The algorithm built in this process (on the CPU and each environment's default backend)
    with the saved actors and learners loaded: every component, or with ``only`` the components
    of those roles alone (the others declared, not built).  ``states`` must hold every actor's and
    learner's, built or not: one without them is not a whole run's.  A state saved on a GPU loads
    too: its tensors are copied onto the CPU copies, and a CUDA generator's state seeds the CPU
    generator in its place (``msrl.rl.load_generator_state``)."""
    names = None
    if only is not None:
        declared = fragments.declare(recipe).components()
        names = frozenset(name for name, component in declared.items() if role_of(component) in only)
    with building(only=names):
        algorithm = recipe.algorithm(recipe.config, fragments.run_info(recipe, None, None))
    for name, component in algorithm.components().items():
        if role_of(component) in LOADED_ROLES:
            built = names is None or name in names
            if not isinstance(states.get(name), dict) or (built and not states[name] and component.state_dict()):
                # evaluating the untrained network it would leave would report a result of nothing
                raise CheckpointError(
                    f"checkpoint has no state for {role_of(component)} {name!r} of "
                    f"{recipe.algorithm.__name__}; it cannot be evaluated or loaded"
                )
            if not built:
                continue
            try:
                component.load_state_dict(states[name])
            except (KeyError, RuntimeError, ValueError, TypeError) as exc:
                raise CheckpointError(
                    f"checkpoint state of {name!r} does not fit {recipe.algorithm.__name__}: "
                    f"{str(exc).splitlines()[0][:200]}"
                ) from exc
    return algorithm


def eval_seed(config: LoadedConfig) -> int:
    """The seed of a run's greedy evaluation: its ``eval`` stream, apart from training's."""
    return RunInfo(seed=config.run.seed).seed_for("eval")


def evaluate_states(
    recipe: fragments.BuildRecipe, policy: DistributionPolicy, states: dict[str, Any], episodes: int, seed: int
) -> Evaluation:
    """Greedy evaluation of the saved states of a run (its actors' and learners' at least): what
    ``msrl eval`` and a run's final evaluation both do, so that they agree.  Only the actors are
    built (a learner's optimizer alone took seconds to set up), in this process, with torch's
    threads those of the fragment that runs the actor under ``policy``, as its executor sizes them
    (more threads only take turns on matrices this small); then one greedy episode in each of
    ``episodes`` environments, stepped as one batch from ``seed``."""
    algorithm = load_components(recipe, states, only=(Role.ACTOR,))
    roles = {name: role_of(component) for name, component in algorithm.components().items()}
    actors = [name for name, role in roles.items() if role is Role.ACTOR]
    fragment = policy.assign(roles)[actors[0]] if actors else policy.fragments[0].name
    with torch_threads(threads_for(policy.fragment(fragment))):
        return evaluate_algorithm(algorithm, episodes, seed)


def load(checkpoint: str | os.PathLike) -> Algorithm:
    """The algorithm of a checkpoint with its trained weights, built in this process.

    Example::

        ppo = msrl.load("runs/ppo_cartpole/checkpoint.pt")
        action = ppo.actor.greedy(obs)
    """
    payload = load_checkpoint(os.fspath(checkpoint))
    config = load_config(None, base=payload["config"])
    return load_components(recipe_of(config), payload["components"])


def evaluate(checkpoint: str | os.PathLike, episodes: int | None = None, seed: int | None = None) -> Evaluation:
    """Greedy evaluation of a checkpoint: one episode in each of ``episodes`` fresh environments.

    By default it is the run's own final evaluation (``eval.json``) again: as many episodes as
    its config's ``eval_episodes`` (``EVAL_EPISODES`` if that is 0) from the run's evaluation seed
    (``eval_seed``), so the two agree on the same checkpoint."""
    if episodes is not None and (not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1):
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    payload = load_checkpoint(os.fspath(checkpoint))
    config = load_config(None, base=payload["config"])
    return evaluate_states(
        recipe_of(config),
        load_policy(config.run.policy),
        payload["components"],
        episodes if episodes is not None else config.run.eval_episodes or EVAL_EPISODES,
        seed if seed is not None else eval_seed(config),
    )
