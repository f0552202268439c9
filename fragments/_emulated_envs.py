"""The ``cuda-emulated`` backend: an environment's CUDA kernels and its host code
(``msrl.envs.BatchedEnv``), with NumPy arrays as device memory and launches run
by the CPU emulation of ``fragments._cuda_emulation``.

It exists so that the CUDA backends' kernels and bookkeeping are tested on
machines without a GPU: with ``dtype=np.float64`` they must match the NumPy
backends bit for bit (``msrl.envs.consistency``), and with ``np.float32``
they run exactly the arithmetic the GPU build runs (up to the GPU's own
sin/cos and FMA rounding).  Being NumPy-backed, they always check action
values, like the NumPy backends.

Example (any environment whose registration names a kernel source)::

    env = msrl.envs.make(env_id, num_envs=8, backend="cuda-emulated", dtype=np.float64)
    env = fragments.cuda.emulated_env(EnvClass, 8, seed=0, dtype=np.float64)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fragments._cuda_emulation import emulated_module
from fragments._kernel_envs import kernel_env
from msrl.envs import BatchedEnv, NumpyArrays


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
    leaves the episode bookkeeping to the host (``msrl.envs.Kernels``).  ``env_kwargs``
    are the environment's own (constants are compiled into its kernels: one build per
    configuration).  A multi-agent environment runs one block per environment, whose
    ``threads_per_block`` threads stride over its agents, each block an OpenMP team of
    that many OS threads, so small blocks are the fast ones here."""
    arrays = NumpyArrays(dtype)
    return kernel_env(env, num_envs, seed, arrays, emulated_module, threads_per_block, fuse_episodes, **env_kwargs)
