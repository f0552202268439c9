"""Fragments: cutting a traced dataflow graph into the pieces a distribution
policy places, the programs each fragment replica runs, the executors that
run them, and the in-process runtime of the ``local`` policy.

Example::

    fdg = fragments.partition(msrl.trace(algorithm), policies.load_policy("local"))
    print(fdg)

The kernel backends of environments (``fragments.cuda``, the emulated twins, the
native CPU builds) are offered to ``msrl.envs`` as a plug-in through the
``msrl.env_backends`` entry point: ``msrl.envs`` finds them by name when
asked, and importing ``fragments`` registers nothing.  This package knows no
particular environment: it builds whichever kernel source an environment's
registration names (``msrl.envs.registrations()``).
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
from fragments._calibrate import calibrate
from fragments._cost import Calibration, ClusterShape, CostConstants, Link, Prediction, place, predict
from fragments._fdg import PER_ITERATION, PER_STEP, Fragment, FragmentedGraph, Interface, ReplicaId
from fragments._flat import FLAT_RULE, CutEdgeError, check_flat, flat_violation
from fragments._interfaces import combine, concat_batched, route, sources, split_batched
from fragments._local import LocalRuntime
from fragments._pairs import ReplyPair, program_pairs, reply_pairs
from fragments._partition import partition
from fragments._program import FragmentProgram, LoopBlock, Recv, build_program
from fragments._runtime import IterationResult, ReplicaReport, Runtime, merge_compiled


def register_env_backends(register) -> None:
    """The ``msrl.env_backends`` plug-in (pyproject.toml): for every environment whose
    registration names a kernel source, its kernels on a GPU through pycuda (``cuda``), on
    the CPU emulation (``cuda-emulated``) and compiled natively for the CPU
    (``cpu-kernel``), each the environment's own class stepped by fused kernels.
    Registered by name: nothing is imported or compiled until one is built."""
    from fragments._kernel_envs import register_kernel_backends

    register_kernel_backends(register)


__all__ = [
    "FLAT_RULE",
    "Calibration",
    "ClusterShape",
    "CostConstants",
    "Link",
    "Prediction",
    "calibrate",
    "place",
    "predict",
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
