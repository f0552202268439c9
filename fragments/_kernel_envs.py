"""What the kernel backends of ``msrl.envs``'s environments share: building an
environment whose steps are fused kernels, and the backends' one table.

The host side of a kernel-backed environment (action checks, episode tracking,
``set_state``, checkpoints, the Philox seed and counter) is ``msrl.envs``'s
``BatchedEnv``, the same code as the NumPy and torch backends; the kernels do
physics, time limit, autoreset and (``fuse_episodes``, the default) the episode
tracker's per-step bookkeeping in one launch.  What differs between the GPU
(``fragments.cuda``: torch tensors, pycuda launches), its CPU twin
(``fragments._emulated_envs``: NumPy arrays, emulated launches) and the native CPU
build (``fragments.native``) is only the memory (an ``ArrayBackend``) and the
``loader`` that turns a kernel source into something that launches.

None of it knows a particular environment: every environment whose registration
names a kernel source (``msrl.envs.registrations()``) gets every backend of
``KERNEL_BACKENDS``, built from the class the registration names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msrl.envs
from msrl.core import import_object
from msrl.envs import ArrayBackend, BatchedEnv, EnvRegistration, Kernels, Launcher

KERNEL_BACKENDS: dict[str, tuple[str, dict[str, bool]]] = {
    "cuda": ("fragments.cuda:cuda_env", {"on_device": True}),
    "cuda-emulated": ("fragments._emulated_envs:emulated_env", {}),
    "cpu-kernel": ("fragments.native:native_env", {"threaded": True, "fallback": True}),
}
"""Backend name -> (its builder, ``"module:function"`` taking the environment class first;
what ``msrl.envs.make`` passes it, as ``msrl.envs.register``'s flags: ``device=`` on a torch
device, ``threads=`` and ``fallback=`` from the fragment's ``EnvDefaults``)."""


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


@dataclass(frozen=True)
class KernelBackend:
    """One kernel backend of one registered environment: ``builder`` (a value of
    ``KERNEL_BACKENDS``) applied to the class ``registration`` names, both imported when
    the environment is first built, so registering imports and compiles nothing."""

    builder: str
    registration: EnvRegistration

    def __call__(self, num_envs: int, seed: int = 0, **options: Any) -> BatchedEnv:
        build = import_object(self.builder, "kernel builder")
        built: BatchedEnv = build(self.registration.env_class(), num_envs, seed, **options)
        return built


def register_kernel_backends(register: Callable[..., None]) -> None:
    """``register`` every backend of ``KERNEL_BACKENDS`` for every registered environment
    with a kernel source."""
    for registration in msrl.envs.registrations().values():
        if registration.kernel_source is None:
            continue
        for backend, (builder, flags) in KERNEL_BACKENDS.items():
            register(registration.env_id, backend, KernelBackend(builder, registration), **flags)
