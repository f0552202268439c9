"""From a checked config to a runnable plan: the algorithm declared (nothing
built), traced, cut by the distribution policy, and every replica's build
checked, all before a runtime starts or a file is written."""

from __future__ import annotations

from dataclasses import dataclass

import cluster
import fragments
from fragments.executors import get_executor
from msrl.app._config import LoadedConfig
from msrl.app._registry import get_algorithm
from msrl.core import BuildError, component_class, role_of, trace
from policies import load_policy


@dataclass
class Plan:
    config: LoadedConfig
    recipe: fragments.BuildRecipe
    fdg: fragments.FragmentedGraph
    agents_per_env: int = 1
    """Agents in each environment (of the run's one environment component; 1 when single-agent):
    agent steps are env steps times this."""


def recipe_of(config: LoadedConfig) -> fragments.BuildRecipe:
    """What building the configured algorithm takes, anywhere in the run."""
    return fragments.BuildRecipe(get_algorithm(config.run.algorithm), config.algo, config.run.seed,
                                 config.run.total_env_steps)


def plan(config: LoadedConfig) -> Plan:
    """Declare, trace and partition the configured run, and check every replica's build."""
    policy = load_policy(config.run.policy)
    if policy.in_process:  # remote fragments are checked where they run
        for spec in policy.fragments:
            get_executor(spec.executor).check_available(spec)
    recipe = recipe_of(config)
    whole = fragments.declare(recipe)
    fdg = fragments.partition(trace(whole), policy)
    fragments.check_builds(recipe, fdg, whole)
    envs = [c for c in whole.components().values() if role_of(c) == "env"]
    return Plan(config, recipe, fdg, _agents_per_env(envs[0]) if len(envs) == 1 else 1)


def _agents_per_env(env: object) -> int:
    """An environment's agents: known for one made by ``msrl.envs.make``; otherwise its class's
    declared ``num_agents`` (a declared component has no instance to read)."""
    try:
        return int(getattr(env, "num_agents", 1) or 1)
    except BuildError:
        return int(getattr(component_class(env), "num_agents", 1) or 1)


def make_runtime(plan: Plan, address: str | None = None) -> fragments.Runtime:
    """The runtime for the plan's policy: in this process for ``local``, on Ray otherwise."""
    if plan.fdg.policy.in_process:
        return fragments.LocalRuntime(plan.recipe, plan.fdg)
    return cluster.RayRuntime(plan.recipe, plan.fdg, address=address)
