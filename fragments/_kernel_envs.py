"""What the two kernel backends of msrl's environments share: building an
``msrl.envs`` environment whose steps are fused kernels.

The host side of a kernel-backed environment (action checks, episode tracking,
``set_state``, checkpoints, the Philox seed and counter) is ``msrl.envs``'s
``BatchedEnv``, the same code as the NumPy and torch backends; the kernels do
physics, time limit, autoreset and (``fuse_episodes``, the default) the episode
tracker's per-step bookkeeping in one launch.  What differs between the GPU
(``fragments.cuda``: torch tensors, pycuda launches) and its CPU twin
(``fragments._emulated_envs``: NumPy arrays, emulated launches) is only the
memory (an ``ArrayBackend``) and the ``loader`` that turns a kernel source into
something that launches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msrl.envs import ArrayBackend, BatchedEnv, Kernels, Launcher


def kernel_env(
    env: type[BatchedEnv],
    num_envs: int,
    seed: int,
    arrays: ArrayBackend,
    loader: Callable[[str, dict[str, object]], Launcher],
    threads_per_block: int,
    fuse_episodes: bool = True,
    **env_kwargs: Any,
) -> BatchedEnv:
    """``env(num_envs, seed, **env_kwargs)`` in ``arrays`` memory, stepped by its kernels
    (``env.kernel``), each launch with ``threads_per_block`` threads per block;
    ``fuse_episodes``: ``msrl.envs.Kernels``'s."""
    kernels = Kernels(loader, threads_per_block, fuse_episodes)
    return env(num_envs, seed, backend=arrays, kernels=kernels, **env_kwargs)
