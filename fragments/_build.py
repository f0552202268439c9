"""Building one fragment replica, and checking before a run starts that every
replica of every fragment can be built.

msrl owns the split of work.  Every copy (replica) of a fragment is built from
the same ``BuildRecipe`` with:

* its share of the config's per-run quantities (``msrl.split`` fields) and of
  the run's environment steps, the config divided by the fragment's copy count;
* its own ``RunInfo`` (its data seed, the fragment's device, and how the
  fragment's executor wants environments built: ``RunInfo.env_defaults``,
  which the algorithm passes to ``msrl.envs.make``);
* only its own components constructed (the others are ``Declared``).

It then traces ``train_step`` again with its share, so a constant that comes
from a per-run quantity (a sampled batch size passed to a buffer) is this
copy's share too, and runs the program cut from that trace.  ``check_builds``
does all of this on the driver without constructing anything, before a worker
starts: shares that do not divide, an environment count that does not follow
the split (a count field that is not ``msrl.split``, which would otherwise
silently double the batch), and a ``train_step`` whose calls change with the
share are one-line errors there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from fragments._fdg import FragmentedGraph
from fragments._partition import partition
from fragments._program import FragmentProgram, build_program
from fragments._runtime import ReplicaReport
from fragments.executors import Executor, get_executor
from msrl.core import (
    Algorithm,
    BuildError,
    CarryRef,
    ConfigError,
    DataflowGraph,
    Op,
    Role,
    RunInfo,
    ValueRef,
    building,
    map_leaves,
    role_of,
    share,
    split_fields,
    trace,
)
from msrl.rl import compiling, switch_compiled


@dataclass(frozen=True)
class BuildRecipe:
    """What every replica of a run is built from (picklable: Ray workers receive it).

    ``config`` is the algorithm's config with per-run quantities as the user wrote
    them, for the whole run; ``total_env_steps`` likewise."""

    algorithm: type[Algorithm]
    config: Any
    seed: int
    total_env_steps: int


@dataclass
class Replica:
    """One built replica: the algorithm (its fragment's components constructed), the
    components it runs, the program cut from its own trace, and its executor class.

    ``start`` makes and sets up its executor, and ``iterate`` runs one iteration and reports
    it: the one place both runtimes (``LocalRuntime`` and the Ray worker) run a replica."""

    algorithm: Algorithm
    components: dict[str, Any]
    program: FragmentProgram
    executor_cls: type[Executor]
    fragment: str
    replica: int
    running: Executor | None = None
    """The executor ``start`` set up, which ``iterate`` runs."""

    def executor(self, fdg: FragmentedGraph, transport: Any = None) -> Executor:
        spec = fdg.fragments[self.fragment].spec
        return self.executor_cls(
            self.program, self.components, fdg.graph.components, spec, replica=self.replica, transport=transport
        )

    def start(self, fdg: FragmentedGraph, transport: Any = None) -> Executor:
        """Make this replica's executor (with ``transport`` to the other fragments) and set it up."""
        self.running = self.executor(fdg, transport)
        self.running.setup()
        return self.running

    def iterate(self, policy_lag: float = 0.0) -> ReplicaReport:
        """Run one iteration of the fragment program; what it returned, measured and reported."""
        if self.running is None:
            raise RuntimeError(f"replica {self.replica} of fragment {self.fragment!r} was not started")
        output = self.running.run()
        timings, env_steps = self.running.take_stats()
        metrics: dict[str, float] = {}
        for component in self.components.values():
            metrics.update(component.metrics())
        compiled = switch_compiled()  # between iterations: each update and rollout runs one way throughout
        return ReplicaReport(
            self.fragment, self.replica, output, metrics, timings, env_steps, policy_lag, compiling(), compiled
        )


def _where(fdg: FragmentedGraph, fragment: str) -> str:
    copies = fdg.fragments[fragment].replicas
    return f"the {copies} replicas of fragment {fragment!r}"


def copy_config(recipe: BuildRecipe, fdg: FragmentedGraph, fragment: str) -> Any:
    """The algorithm's config for one copy of ``fragment``: per-run quantities shared out.

    The config's own ``validate`` checks the whole run's numbers (when it is read);
    what a share must satisfy is for the components that receive it to check
    (a learner whose minibatches do not divide its share of the batch), when they
    are built: before the first iteration, and before a run directory exists."""
    return share(recipe.config, fdg.fragments[fragment].replicas, _where(fdg, fragment))


def run_info(recipe: BuildRecipe, fdg: FragmentedGraph | None, fragment: str | None, replica: int = 0) -> RunInfo:
    """What copy ``replica`` of ``fragment`` is told about the run (the whole run's, with plain
    environment defaults, when ``fragment`` is None): its seeds, its share of the environment
    steps, the fragment's device and its executor's ``env_defaults``."""
    if fdg is None or fragment is None:
        return RunInfo.for_copy(recipe.seed, recipe.total_env_steps, 0, 1)
    spec = fdg.fragments[fragment].spec
    env = get_executor(spec.executor).env_defaults(spec)
    return RunInfo.for_copy(recipe.seed, recipe.total_env_steps, replica, spec.replicas, spec.device, env)


def declare(
    recipe: BuildRecipe, fdg: FragmentedGraph | None = None, fragment: str | None = None, replica: int = 0
) -> Algorithm:
    """The algorithm as one copy of ``fragment`` would build it (the whole run when
    ``fragment`` is None), with no component constructed: enough to trace it."""
    config = recipe.config if fragment is None or fdg is None else copy_config(recipe, fdg, fragment)
    with building(only=frozenset()):
        return recipe.algorithm(config, run_info(recipe, fdg, fragment, replica))


def build_replica(recipe: BuildRecipe, fdg: FragmentedGraph, fragment: str, replica: int) -> Replica:
    """Construct ``fragment``'s components for copy ``replica`` and cut its program from
    its own trace.  Runs where the replica runs (the driver for ``local``, a Ray worker
    otherwise); the executor's ``check_available`` should have passed there first."""
    spec = fdg.fragments[fragment].spec
    executor_cls = get_executor(spec.executor)
    mine = fdg.fragments[fragment].components
    everything = set(mine) == set(fdg.graph.components)
    try:
        with building(only=None if everything else frozenset(mine)):
            algorithm = recipe.algorithm(copy_config(recipe, fdg, fragment), run_info(recipe, fdg, fragment, replica))
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "alloc" not in str(exc) and "out of memory" not in str(exc):
            raise
        raise BuildError(
            f"copy {replica} of fragment {fragment!r} needs more memory than there is "
            f"({_first_line(exc)}); lower the algo sizes it allocates (num_envs, buffer_size...) "
            f"or spread them over more replicas"
        ) from None
    graph = trace(algorithm)
    check_same_graph(graph, fdg.graph, f"copy {replica} of fragment {fragment!r}")
    program = build_program(partition(graph, fdg.policy), fragment)
    components = {name: c for name, c in algorithm.components().items() if name in mine}
    return Replica(algorithm, components, program, executor_cls, fragment, replica)


def check_builds(recipe: BuildRecipe, fdg: FragmentedGraph, whole: Algorithm) -> None:
    """On the driver, before anything starts: each fragment's copies can be built
    (shares divide), split the run's environments instead of repeating them, and
    trace to the same calls.  ``whole`` is the declared algorithm of the run.

    The copies of a fragment get one and the same share of the config and differ
    only in their seeds, so the first copy stands for all of them here (and each
    copy checks its own trace again where it is built): start-up stays one trace
    per fragment however many replicas it has."""
    local_envs = _env_counts(whole, None)
    for name, fragment in fdg.fragments.items():
        algorithm = declare(recipe, fdg, name, 0)
        check_same_graph(trace(algorithm), fdg.graph, f"copy 0 of fragment {name!r}")
        if fragment.replicas > 1:
            _check_env_split(name, fragment.replicas, _env_counts(algorithm, fragment.components), local_envs, recipe)


def _env_counts(algorithm: Algorithm, only: list[str] | None) -> dict[str, int | None]:
    counts: dict[str, int | None] = {}
    for name, component in algorithm.components().items():
        if role_of(component) is Role.ENV and (only is None or name in only):
            try:
                counts[name] = int(cast(Any, component).num_envs)  # a Declared one raises BuildError
            except (AttributeError, BuildError, TypeError, ValueError):
                counts[name] = None
    return counts


def _check_env_split(
    fragment: str, copies: int, per_copy: dict[str, int | None], local: dict[str, int | None], recipe: BuildRecipe
) -> None:
    fields = ", ".join(f"algo.{f}" for f in split_fields(recipe.config)) or "none"
    for env, count in per_copy.items():
        whole = local.get(env)
        if count is None or whole is None:
            raise ConfigError(
                f"cannot tell how many environments {env!r} steps without building it, so msrl cannot "
                f"share them among the {copies} replicas of fragment {fragment!r}; make it with "
                f"msrl.envs.make or give its class a num_envs constructor argument"
            )
        if count * copies != whole:
            raise ConfigError(
                f"environment {env!r} steps {count} environments in each of the {copies} replicas of "
                f"fragment {fragment!r} ({count * copies} in all) where the run steps {whole}: the config "
                f"field that sets its count must be a per-run quantity, declared with msrl.split(...) "
                f"(per-run quantities of {recipe.algorithm.__name__}: {fields})"
            )


def check_same_graph(graph: DataflowGraph, reference: DataflowGraph, what: str) -> None:
    """A copy's trace must make the same calls as the run's: only constants (its shares) may differ."""
    mine, theirs = _shape(graph), _shape(reference)
    if mine == theirs:
        return
    for ours, ref in zip(mine, theirs):
        if ours != ref:
            raise BuildError(
                f"train_step traces differently for {what} than for the whole run ({ours[0]} vs "
                f"{ref[0]}): a per-run quantity (msrl.split) must not decide loop bounds or which calls "
                f"are made; use it only as an argument"
            )
    raise BuildError(
        f"train_step traces {len(mine)} steps for {what} but {len(theirs)} for the whole run: a per-run "
        f"quantity (msrl.split) must not decide loop bounds or which calls are made"
    )


def _shape(graph: DataflowGraph) -> list[tuple]:
    def leaf(value: Any) -> Any:
        if isinstance(value, CarryRef):
            return CarryRef(leaf(value.init), value.update)
        return value if isinstance(value, ValueRef) else "const"

    nodes = [
        (
            node.name,
            node.op,
            node.target if node.op is Op.CALL_COMPONENT else getattr(node.target, "__name__", "?"),
            node.region,
            map_leaves(leaf, node.args),
            map_leaves(leaf, node.kwargs),
        )
        for node in graph.nodes
    ]
    regions = [(f"loop {r.name}", r.trip_count, tuple(r.nodes)) for r in graph.regions.values()]
    return nodes + regions


__all__ = [
    "BuildRecipe",
    "Replica",
    "build_replica",
    "check_builds",
    "check_same_graph",
    "copy_config",
    "declare",
    "run_info",
]


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:160]
