"""The ``cpu-kernel`` backend: an environment's CUDA kernels compiled natively for
the CPU, for speed on machines without a GPU, and the public face of that build
(``NativeModule``: one ``.cu`` source as a C++ library; see ``fragments._native``
and ``kernels/cpu_native.h`` for how it runs CUDA code).

The same kernels and the same host code (``msrl.envs.BatchedEnv``) as the ``cuda``
and ``cuda-emulated`` backends, with NumPy arrays as device memory: with
``dtype=np.float64`` they match the NumPy backends bit for bit, and with
``np.float32`` (the default) they run the arithmetic the GPU build runs.  Kernels
that may reach ``__syncthreads`` (a multi-agent environment's) run one thread per
block, their agent loops plain loops; environments are spread over ``threads``
OpenMP threads.  A single-agent environment with ``Discrete`` actions whose step
kernel has the usual signature steps by one C call (``FusedStep``).

A machine without a C++ compiler, or where the build fails, gets one
``ConfigError`` line naming the problem (``msrl: error: ...`` on the command line);
``fallback=True`` builds the NumPy backend instead and says so in one line.

Example (any environment whose registration names a kernel source)::

    env = msrl.envs.make(env_id, num_envs=64, backend="cpu-kernel", dtype=np.float64)
    env = fragments.native.native_env(EnvClass, 100, threads=2)
"""

from __future__ import annotations

import functools
import sys
from typing import Any, cast

import numpy as np

from fragments._cxx import NoCompilerError
from fragments._kernel_envs import kernel_env
from fragments._kernel_source import KernelBuildError
from fragments._native import PARALLEL_MIN_THREADS, NativeModule, native_module
from msrl.core import ConfigError, Declared, Discrete
from msrl.envs import BatchedEnv, EpisodeTracker, KernelDynamics, MultiAgentEnv, NumpyArrays

BACKEND = "cpu-kernel"
_INT64 = np.dtype(np.int64)
SINGLE_AGENT_BLOCK = 256
"""Threads per block of the one-thread-per-environment kernels: a block's threads are a plain
loop here, and 256 of them per block measured ~20% faster than blocks of one (fewer block
switches); fewer when there are fewer environments (a thread past the last environment only
returns).  Multi-agent kernels (barriers) always run blocks of one thread."""


def _one_line(exc: BaseException) -> str:
    """A build failure in one line: its first line and the compiler's first error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    error = next((line for line in lines[1:] if "error" in line.lower()), None)
    return f"{lines[0].rstrip(':')}: {error}" if error else lines[0]


def native_env(
    env: type[BatchedEnv],
    num_envs: int,
    seed: int = 0,
    dtype: Any = np.float32,
    threads_per_block: int | None = None,
    threads: int = 1,
    fallback: bool = False,
    fuse_episodes: bool = True,
    fused_step: bool = True,
    **env_kwargs: Any,
) -> BatchedEnv:
    """``env``'s kernels compiled natively; the state is ``dtype`` (float64 for exact
    agreement with NumPy, float32 like the GPU).  ``env_kwargs`` are the environment's own
    (constants are compiled into its kernels: one build per configuration).
    ``threads_per_block``: by default ``SINGLE_AGENT_BLOCK`` (at most one per environment)
    for a single-agent environment, 1 for a multi-agent one (one block of one thread per
    environment: each phase of a step a plain loop over the agents).  ``threads``: OpenMP
    threads a large batch is split over (``msrl.envs.make`` passes the fragment's CPU
    share).  ``fallback``: on a machine where the kernels cannot be built, return the NumPy
    backend (float64) after one line on stderr, instead of raising ``ConfigError``
    (``msrl.envs.make`` passes True where the fragment's executor prefers this backend,
    ``executor: cpu-kernel``, so a backend asked for by name raises).  ``fuse_episodes``:
    ``msrl.envs.Kernels``'s.  ``fused_step``: a single-agent environment steps by one C
    call where its kernels and the action allow (``FusedStep``)."""
    multi_agent = issubclass(env, MultiAgentEnv)
    if threads_per_block is None:
        threads_per_block = 1 if multi_agent else min(SINGLE_AGENT_BLOCK, num_envs)
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ConfigError(f"{env.env_id} backend {BACKEND!r}: threads must be a positive integer, got {threads!r}")
    loader = functools.partial(native_module, threads=threads)
    try:
        arrays = NumpyArrays(dtype)
        stepped = fused(env) if fused_step and not multi_agent else env
        built = kernel_env(stepped, num_envs, seed, arrays, loader, threads_per_block, fuse_episodes, **env_kwargs)
    except (NoCompilerError, KernelBuildError, OSError) as exc:  # OSError: the library would not load
        message = f"{env.env_id} backend {BACKEND!r} is unavailable: {_one_line(exc)}"
        if not fallback:
            raise ConfigError(f"{message}; backend='numpy' runs without a compiler") from None
        print(f"msrl: {message}; using the NumPy backend instead", file=sys.stderr)
        return env(num_envs, seed, **env_kwargs)
    if isinstance(built, Declared):  # another fragment's build: declared, not constructed
        return built
    barriers = [k for k in built.dynamics.launcher.kernels if built.dynamics.launcher.uses_barrier(k)]
    if barriers and built.dynamics.block != (1, 1, 1):  # refused now, not at the first step
        raise ConfigError(
            f"{env.env_id} backend {BACKEND!r} runs {', '.join(barriers)} (which may reach __syncthreads()) "
            f"with one thread per block: threads_per_block must be 1, got {threads_per_block}"
        )
    return built


class FusedEpisodes(EpisodeTracker):
    """An ``EpisodeTracker`` whose ``record`` a fused native step does in C (the same
    operations in the same order, ``cpu_native.h``'s ``record_step``)."""

    def fused_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(total, start, lengths)``, updated in place by the fused step."""
        return self._total, self._start, self.lengths

    def fused_recorded(self, finished: int) -> None:
        """What ``record`` counts on the host: one step, ``finished`` episodes."""
        self._steps += 1
        self._count_host += finished


class FusedStep(BatchedEnv):
    """A single-agent environment on native kernels whose ``step`` is one C call for the
    usual action (an int64 NumPy array of shape ``(num_envs,)``): the action check, the
    kernel and the episode bookkeeping, without the Python of ``BatchedEnv.step``, which at
    64 environments cost several times the kernel.  Any other action, one out of range, an
    environment without ``Discrete`` actions or a step kernel without the usual signature
    (``fragments._native.fusable``) takes ``BatchedEnv.step`` (same results, or its error).
    ``fused(EnvClass)`` is the class that steps ``EnvClass`` this way."""

    def __init__(self, num_envs: int, seed: int = 0, **options: Any) -> None:
        super().__init__(num_envs, seed, **options)
        dynamics = cast(KernelDynamics, self.dynamics)
        fused_step = getattr(dynamics.launcher, "fused_step", None)  # a NativeModule's
        discrete = isinstance(self.action_space, Discrete)
        self._fused = fused_step(f"{self.kernel}_step", dynamics.grid, dynamics.block) if fused_step else None
        if not discrete:
            self._fused = None
        if self._fused is not None:
            counts = dynamics.fuse_episodes  # BatchedEnv.step's kernel records into it too
            self._episodes = FusedEpisodes(self.arrays, self.num_envs, counts)  # nothing recorded yet: a drop-in
        self._fused_shape = (self.num_envs,)
        self._fused_obs = (self.num_envs, *self._obs_shape)
        self._n_actions = int(self.action_space.n) if isinstance(self.action_space, Discrete) else 0

    def step(self, action: Any) -> tuple[Any, Any, Any, Any]:
        fused = self._fused
        if (
            fused is not None
            and type(action) is np.ndarray
            and action.dtype is _INT64
            and action.shape == self._fused_shape
        ):
            # Every name spelled out (no tuple of the outputs, no map over it): at 64 envs this
            # call's Python is most of the step, and these cost ~0.5 us of its ~7 (measured).
            n, f32 = self.num_envs, np.float32
            obs, reward, terminated, truncated = (
                np.empty(self._fused_obs, f32),
                np.empty(n, f32),
                np.empty(n, f32),
                np.empty(n, f32),
            )
            total, start, lengths = self._episodes.fused_arrays()
            rng = self.dynamics.rng
            fn, packer, head = fused
            finished = fn(
                packer.pack(
                    *head,
                    id(self._state),
                    id(lengths),
                    id(action),
                    id(obs),
                    id(reward),
                    id(terminated),
                    id(truncated),
                    n,
                    rng.seed,
                    rng.counter,
                    self._n_actions,
                    id(total),
                    id(start),
                )
            )
            if finished >= 0:
                rng.advance()
                self._episodes.fused_recorded(finished)
                return obs, reward, terminated, truncated
        return super().step(action)


_FUSED: dict[type[BatchedEnv], type[BatchedEnv]] = {}


def fused(env: type[BatchedEnv]) -> type[BatchedEnv]:
    """``env`` stepped by ``FusedStep`` where its kernels allow (one class per environment)."""
    if env not in _FUSED:
        namespace = {"__module__": __name__, "__doc__": env.__doc__}
        _FUSED[env] = cast(type[BatchedEnv], type(f"Fused{env.__name__}", (FusedStep, env), namespace))
    return _FUSED[env]


__all__ = [
    "BACKEND",
    "FusedStep",
    "PARALLEL_MIN_THREADS",
    "NativeModule",
    "fused",
    "native_env",
    "native_module",
]
