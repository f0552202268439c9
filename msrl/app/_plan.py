"""From a checked config to a runnable plan: the algorithm declared (nothing
built), traced, cut by the distribution policy, and every replica's build
checked, all before a runtime starts or a file is written."""

from __future__ import annotations

from dataclasses import dataclass

import cluster
import fragments
from fragments.executors import check_fragment
from msrl.app._config import LoadedConfig
from msrl.app._registry import get_algorithm
from msrl.core import BuildError, Role, component_class, role_of, trace
from policies import DistributionPolicy


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
    return fragments.BuildRecipe(
        get_algorithm(config.run.algorithm), config.algo, config.run.seed, config.run.total_env_steps
    )


def plan(config: LoadedConfig) -> Plan:
    """Declare, trace and partition the configured run, and check every replica's build."""
    policy = config.policy
    preflight(policy, on_this_machine=policy.in_process)
    recipe = recipe_of(config)
    whole = fragments.declare(recipe)
    fdg = fragments.partition(trace(whole), policy)
    fragments.check_builds(recipe, fdg, whole)
    envs = [c for c in whole.components().values() if role_of(c) is Role.ENV]
    return Plan(config, recipe, fdg, _agents_per_env(envs[0]) if len(envs) == 1 else 1)


def preflight(policy: DistributionPolicy, on_this_machine: bool) -> None:
    """Check every fragment's executor and device in the driver, before anything starts: the
    executor is known and runs on the fragment's device, the device is one torch names.  With
    ``on_this_machine`` (every replica will run in or beside this process) also that this machine
    can run it (a GPU, pycuda).  Otherwise that is checked where each replica runs: on a cluster
    the driver may have no GPU while the workers do.  Whether the cluster has the resources the
    fragments ask for is checked when it is joined, before any actor starts (``cluster``)."""
    for spec in policy.fragments:
        check_fragment(spec, on_this_machine)


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
    if cluster.starts_embedded(address):
        # The Ray started now is this machine alone, and every replica runs here: what it cannot
        # run fails now, not after Ray's start.
        preflight(plan.fdg.policy, on_this_machine=True)
    return cluster.RayRuntime(
        plan.recipe, plan.fdg, address=address, liveness_timeout_s=plan.config.run.liveness_timeout_s
    )
