"""Fragments: cutting a traced dataflow graph into the pieces a distribution
policy places, the programs each fragment replica runs, the executors that
run them, and the in-process runtime of the ``local`` policy.

Example::

    fdg = fragments.partition(msrl.trace(algorithm), policies.load_policy("local"))
    print(fdg)

The CUDA environment backends (``fragments.cuda``, the emulated twins, the
native CPU builds) are offered to ``msrl.envs`` as a plug-in through the
``msrl.env_backends`` entry point: ``msrl.envs`` finds them by name when
asked, and importing ``fragments`` registers nothing.
"""

from fragments._build import (
    BuildRecipe,
    Replica,
    build_replica,
    check_builds,
    check_same_graph,
    copy_config,
    declare,
    run_info,
)
from fragments._fdg import PER_ITERATION, PER_STEP, Fragment, FragmentedGraph, Interface, ReplicaId
from fragments._flat import FLAT_RULE, CutEdgeError, check_flat, flat_violation
from fragments._interfaces import combine, concat_batched, route, sources, split_batched
from fragments._local import LocalRuntime
from fragments._pairs import ReplyPair, program_pairs, reply_pairs
from fragments._partition import partition
from fragments._program import FragmentProgram, LoopBlock, Recv, build_program
from fragments._runtime import IterationResult, ReplicaReport, Runtime, merge_compiled


def register_env_backends(register) -> None:
    """The ``msrl.env_backends`` plug-in (pyproject.toml): the CUDA C environments,
    on a GPU through pycuda (``cuda``), on the CPU emulation (``cuda-emulated``) and
    compiled natively for the CPU (``cpu-kernel``).  All are ``msrl.envs``'s own
    environment classes stepped by fused kernels.  Registered by name: nothing is
    imported or compiled until one is built."""
    register("CartPole-v1", "cuda", "fragments.cuda:cartpole_cuda", on_device=True)
    register("Pendulum-v1", "cuda", "fragments.cuda:pendulum_cuda", on_device=True)
    register("CartPole-v1", "cuda-emulated", "fragments._emulated_envs:cartpole_emulated")
    register("Pendulum-v1", "cuda-emulated", "fragments._emulated_envs:pendulum_emulated")
    register("Tag-v0", "cuda", "fragments.cuda:tag_cuda", on_device=True)
    register("Tag-v0", "cuda-emulated", "fragments._emulated_envs:tag_emulated")
    register("CartPole-v1", "cpu-kernel", "fragments.native:cartpole_native")
    register("Pendulum-v1", "cpu-kernel", "fragments.native:pendulum_native")
    register("Tag-v0", "cpu-kernel", "fragments.native:tag_native")


__all__ = [
    "FLAT_RULE",
    "BuildRecipe",
    "CutEdgeError",
    "check_flat",
    "flat_violation",
    "Replica",
    "build_replica",
    "check_builds",
    "check_same_graph",
    "copy_config",
    "declare",
    "run_info",
    "PER_ITERATION",
    "PER_STEP",
    "Fragment",
    "FragmentProgram",
    "FragmentedGraph",
    "Interface",
    "IterationResult",
    "LocalRuntime",
    "LoopBlock",
    "Recv",
    "ReplyPair",
    "ReplicaId",
    "ReplicaReport",
    "Runtime",
    "build_program",
    "merge_compiled",
    "program_pairs",
    "reply_pairs",
    "combine",
    "concat_batched",
    "fdg_figure",
    "fdg_to_dot",
    "fragment_colours",
    "partition",
    "register_env_backends",
    "route",
    "sources",
    "split_batched",
    "write_dot",
    "write_png",
]

_DRAWING = ("fdg_figure", "fdg_to_dot", "fragment_colours", "write_dot", "write_png")


def __getattr__(name: str):
    """The drawing functions, imported on first use: they pull in matplotlib, which
    every fragment worker would otherwise load for nothing."""
    if name in _DRAWING:
        from fragments import _render

        return getattr(_render, name)
    raise AttributeError(f"module 'fragments' has no attribute {name!r}")
