"""CPU twins of the CUDA environments: the same kernels and the same host code
(``msrl.envs.BatchedEnv``), with NumPy arrays as device memory and launches
run by the CPU emulation of ``fragments._cuda_emulation``.

They exist so that the CUDA backends' kernels and bookkeeping are tested on
machines without a GPU: with ``dtype=np.float64`` they must match the NumPy
backends bit for bit (``msrl.envs.consistency``), and with ``np.float32``
they run exactly the arithmetic the GPU build runs (up to the GPU's own
sin/cos and FMA rounding).  Being NumPy-backed, they always check action
values, like the NumPy backends.

Example::

    env = msrl.envs.make("CartPole-v1", num_envs=8, backend="cuda-emulated", dtype=np.float64)
    tag = msrl.envs.make("Tag-v0", num_envs=8, backend="cuda-emulated", dtype=np.float64, num_runners=20)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fragments._cuda_emulation import emulated_module
from fragments._kernel_envs import kernel_env
from msrl.envs import BatchedEnv, NumpyArrays
from msrl.envs.cartpole import CartPole
from msrl.envs.pendulum import Pendulum

if TYPE_CHECKING:
    from msrl.envs.tag import Tag


def emulated_env(
    env: type[BatchedEnv],
    num_envs: int,
    seed: int = 0,
    dtype: Any = np.float32,
    threads_per_block: int = 256,
    fuse_episodes: bool = True,
    **env_kwargs: Any,
) -> BatchedEnv:
    """``env``'s kernels on the CPU emulation; the state is ``dtype`` (float64 for
    exact comparisons with NumPy, float32 like the GPU).  Actions go to the kernels
    as int64 (``Discrete``) or float32 (``Box``: a float64 action is rounded to
    float32 first, where the NumPy backend would keep float64).  ``fuse_episodes=False``
    leaves the episode bookkeeping to the host (``msrl.envs.Kernels``)."""
    arrays = NumpyArrays(dtype)
    return kernel_env(env, num_envs, seed, arrays, emulated_module, threads_per_block, fuse_episodes, **env_kwargs)


def cartpole_emulated(num_envs: int, seed: int = 0, **options: Any) -> CartPole:
    """CartPole-v1 on the CPU emulation of its kernels (options: ``emulated_env``)."""
    return emulated_env(CartPole, num_envs, seed, **options)


def pendulum_emulated(num_envs: int, seed: int = 0, **options: Any) -> Pendulum:
    """Pendulum-v1 on the CPU emulation of its kernels (options: ``emulated_env``, and
    ``g``, which is compiled into the kernel)."""
    return emulated_env(Pendulum, num_envs, seed, **options)


def tag_emulated(num_envs: int, seed: int = 0, **options: Any) -> Tag:
    """Tag-v0 on the CPU emulation of its kernels (options: ``emulated_env``, and Tag's
    constants, which are compiled into the kernels: one build per configuration).  One
    block per environment: ``threads_per_block`` threads stride over its agents, and
    each block runs as an OpenMP team of that many OS threads, so small blocks are
    the fast ones here."""
    from msrl.envs.tag import Tag  # imported when first built, like the registry's factories

    return emulated_env(Tag, num_envs, seed, **options)
