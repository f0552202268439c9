"""Fragments: cutting a traced dataflow graph into the pieces a distribution
policy places, and the executors that run them.

Example::

    fdg = fragments.partition(msrl.trace(algorithm), policies.load_policy("local"))
    print(fdg)
"""

from fragments._fdg import PER_ITERATION, PER_STEP, Fragment, FragmentedGraph, Interface
from fragments._partition import partition
from fragments._program import FragmentProgram, LoopBlock, build_program

__all__ = [
    "PER_ITERATION", "PER_STEP", "Fragment", "FragmentProgram", "FragmentedGraph", "Interface", "LoopBlock",
    "build_program", "partition",
]

# --- CUDA environment backends (fragments/cuda.py, fragments/_emulated_envs.py) ---
# Registered by name only: nothing here imports pycuda or compiles a kernel
# until such an environment is built.
import msrl.envs as _msrl_envs  # noqa: E402

_msrl_envs.register("CartPole-v1", "cuda", "fragments.cuda:CartPoleCuda")
_msrl_envs.register("Pendulum-v1", "cuda", "fragments.cuda:PendulumCuda")
_msrl_envs.register("CartPole-v1", "cuda-emulated", "fragments._emulated_envs:CartPoleEmulated")
_msrl_envs.register("Pendulum-v1", "cuda-emulated", "fragments._emulated_envs:PendulumEmulated")
# --- end of CUDA environment backends ---
