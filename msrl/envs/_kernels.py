"""Fused kernels as an environment's dynamics: one launch per step does the
physics, the time limit, the same-step autoreset and the episode bookkeeping,
with the state kept on the device.

``msrl.envs`` knows nothing of pycuda or of how a kernel source is compiled:
``Kernels(loader)`` takes a ``loader(source, defines)`` that returns a
*launcher*, any object with ``launch(kernel, grid, block, args)``; ``source``
is the environment's ``kernel``, the stem of the ``.cu`` file its registration
names.  The ``fragments`` package supplies three, the pycuda one (``cuda``
backend), the CPU emulation of the same source (``cuda-emulated``) and its
native CPU build (``cpu-kernel``).  Arrays are the environment's
``ArrayBackend`` memory (torch tensors for pycuda, NumPy arrays on the CPU),
passed to the launcher as they are.

The kernel contract, for an environment whose ``kernel`` is ``"name"``
(``real`` is float or double, chosen with ``-DMSRL_REAL``; one thread per env)::

    name_reset(real* state, long long n, unsigned long long seed, unsigned long long counter)
    name_observe(const real* state, float* obs, long long n)
    name_step(real* state, const long long* elapsed, <action>* actions, float* obs, float* reward,
              float* terminated, float* truncated, long long n, unsigned long long seed,
              unsigned long long counter)
    name_step_tracked(real* state, long long* elapsed, <action>* actions, float* obs, float* reward,
                      float* terminated, float* truncated, double* total, double* start,
                      long long* finished, long long n, unsigned long long seed,
                      unsigned long long counter)

``elapsed`` is the episode tracker's running length (steps taken before this
one): the kernel truncates when ``elapsed + 1`` reaches the limit.  After
``name_step`` the host's shared bookkeeping (``EpisodeTracker.record``, a few
array operations) counts the step; ``name_step_tracked`` is the same step
followed, in the same thread, by that bookkeeping for its environment
(``msrl_episodes.cuh``'s ``msrl_record_step``): ``total += (double)reward``
(float64 += float32, as torch and NumPy promote), and if the episode ended
``start = total``, ``elapsed = 0`` and ``finished += 1``, else ``elapsed += 1``.
``total``, ``start``, ``elapsed`` and ``finished`` are the tracker's arrays
(``EpisodeTracker.record_by``); ``finished`` counts per environment, folded in
by ``metrics()``/``state_dict()``, so no thread adds to a shared address.  The
dynamics launch ``name_step_tracked`` unless ``Kernels.fuse_episodes`` is
False.  ``<action>`` is ``long long`` for ``Discrete`` and ``float`` for
``Box`` spaces.

Random state: kernels draw from Philox, a pure function of ``(seed, counter,
env)``; every launch that draws gets the counter and advances it, so the two
integers are the whole random state a checkpoint stores.

Multi-agent environments (``MultiAgentEnv``, e.g. Tag) launch *one block per
environment* (``grid = (n, 1, 1)``) of ``min(threads_per_block, num_agents)``
threads, which stride over the agents (``for (i = threadIdx.x; i < N; i +=
blockDim.x)``), so an environment may have more agents than a block has
threads.  Every per-agent array comes once per group, in the order of
``env.groups``::

    name_reset(real* state, long long n, unsigned long long seed, unsigned long long counter)
    name_observe(const real* state, float* obs_<group>..., long long n)
    name_step(real* state, const long long* elapsed, <action>* actions_<group>..., float* obs_<group>...,
              float* reward_<group>..., float* terminated, float* truncated, long long n,
              unsigned long long seed, unsigned long long counter)

with ``actions_<group>`` ``(n, n_group)`` (``(n, n_group, *shape)`` for ``Box``),
``obs_<group>`` ``(n, n_group, *obs_shape)`` and ``reward_<group>`` ``(n,
n_group)``, the flags per environment.  The one limit of this layout is the
random stream: an agent's reset draws use Philox stream blocks ``2 i`` and ``2 i
+ 1`` of its environment's index, and a stream block is 24 bits, so an
environment has at most ``MAX_KERNEL_AGENTS`` (2^23) agents; a larger
configuration is refused before anything is compiled or allocated.

There is no multi-agent ``name_step_tracked``: their bookkeeping (``GroupEpisodes``,
means of the agents' rewards per group and overall) stays in host array operations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from msrl.core import AgentGroup, CheckpointError, ConfigError
from msrl.envs._arrays import Array, ArrayBackend
from msrl.envs._episodes import Episodes, EpisodeTracker

_U64 = (1 << 64) - 1


class Launcher(Protocol):
    def launch(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any]) -> None: ...


class KernelEnv(Protocol):
    """What kernel dynamics read of the environment they step (``BatchedEnv`` has it all):
    this module knows environments only through it, so that ``_base`` can import it."""

    num_envs: int
    arrays: ArrayBackend

    @property
    def env_id(self) -> str: ...

    @property
    def kernel(self) -> str | None: ...

    @property
    def physics(self) -> Mapping[str, Any]: ...

    def kernel_defines(self) -> dict[str, object]: ...


class MultiAgentKernelEnv(KernelEnv, Protocol):
    """A ``KernelEnv`` with agent groups (``MultiAgentEnv``)."""

    num_agents: int
    groups: dict[str, AgentGroup]


class PhiloxRNG:
    """A Philox key (``seed``) and launch ``counter``: every draw on the device is a
    function of these and the environment's index."""

    def __init__(self, seed: int) -> None:
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        self.seed, self.counter = int(seed) & _U64, 0

    def advance(self, launches: int = 1) -> int:
        """The counter for the next launch, which uses ``launches`` counter values."""
        counter = self.counter
        self.counter = (counter + launches) & _U64
        return counter

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "counter": self.counter}

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, dict) or not {"seed", "counter"} <= set(state):
            raise CheckpointError(f"kernel checkpoint rng must be {{'seed', 'counter'}}, got {state!r}")
        self.seed, self.counter = int(state["seed"]) & _U64, int(state["counter"]) & _U64


@dataclass(frozen=True)
class Kernels:
    """Step by the environment's fused kernels, built by ``loader(source, defines)``;
    ``threads_per_block`` threads per block, one per environment.  The environment
    picks its dynamics class (``BatchedEnv._kernel_dynamics``: ``KernelDynamics``, or
    ``MultiAgentKernelDynamics`` for a ``MultiAgentEnv``).

    ``fuse_episodes``: a single-agent step is one launch of ``name_step_tracked``,
    episode bookkeeping included; False launches ``name_step`` and leaves the
    bookkeeping to the host's array operations (the same numbers, in eight more
    launches per step on a GPU: kept to measure against)."""

    loader: Callable[[str, dict[str, object]], Launcher]
    threads_per_block: int = 256
    fuse_episodes: bool = True


class KernelDynamics:
    """The dynamics of ``env`` as launches of ``env.kernel``'s kernels."""

    name = "kernels"
    exact_actions = True  # kernels take contiguous int64 or float32 actions

    def __init__(self, env: KernelEnv, kernels: Kernels, seed: int) -> None:
        if env.kernel is None:
            raise ConfigError(f"{env.env_id} has no kernels; it runs on: {', '.join(env.physics)}")
        tpb = kernels.threads_per_block
        if not isinstance(tpb, int) or isinstance(tpb, bool) or not 1 <= tpb <= 1024:
            raise ConfigError(f"threads_per_block must be an integer in [1, 1024], got {tpb!r}")
        arrays = env.arrays
        if getattr(arrays, "columns", False):
            raise ConfigError("kernels need row-major state: build the TorchArrays with columns=False")
        if not isinstance(kernels.fuse_episodes, bool):
            raise ConfigError(f"fuse_episodes must be True or False, got {kernels.fuse_episodes!r}")
        self.fuse_episodes = kernels.fuse_episodes
        self.arrays = arrays
        self.num_envs = env.num_envs
        self.grid, self.block = self._layout(env, tpb)
        self.rng = PhiloxRNG(seed)
        self._flags: tuple[Array, Array] | None = None  # the last step's (terminated, truncated)
        real = "double" if arrays.dtype.itemsize == 8 else "float"
        self.launcher = kernels.loader(env.kernel, {"MSRL_REAL": real, **env.kernel_defines()})
        self._reset, self._step, self._observe, self._step_tracked = (
            f"{env.kernel}_{k}" for k in ("reset", "step", "observe", "step_tracked")
        )

    def _layout(self, env: KernelEnv, tpb: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` of every launch: one thread per environment."""
        return (-(-env.num_envs // tpb), 1, 1), (tpb, 1, 1)

    def launch(self, kernel: str, args: list[Any]) -> None:
        """``kernel<<<grid, block>>>(*args)`` in this dynamics' layout."""
        self.launcher.launch(kernel, self.grid, self.block, args)

    def reset(self, state: Array) -> Array:
        self.launch(self._reset, [state, self.num_envs, self.rng.seed, self.rng.advance()])
        return state

    def observe(self, state: Array, out: Array) -> None:
        self.launch(self._observe, [state, out, self.num_envs])

    def final_obs(self, obs: Any) -> Any:
        """``obs`` (an array, or a dict of one per group) with NaN on the rows the last step
        finished: the step kernel resets them, so their episodes' last observations are gone."""
        rows = None if self._flags is None else self.arrays.finished_rows(*self._flags)
        if rows is not None:
            for part in obs.values() if isinstance(obs, dict) else (obs,):
                self.arrays.fill_rows(part, rows, float("nan"))
        return obs

    def forget_final(self) -> None:
        self._flags = None

    def step(
        self,
        state: Array,
        episodes: Episodes,
        action: Array,
        obs: Array,
        reward: Array,
        terminated: Array,
        truncated: Array,
    ) -> Array:
        """One step, recorded into ``episodes`` (the environment's ``EpisodeTracker``): by
        the step kernel itself, or after it by the tracker's array operations."""
        outputs, rng, n = (obs, reward, terminated, truncated), self.rng, self.num_envs
        self._flags = (terminated, truncated)
        if self.fuse_episodes:

            def launch(total: Array, start: Array, lengths: Array, finished: Array) -> None:
                args = [state, lengths, action, *outputs, total, start, finished, n, rng.seed, rng.advance()]
                self.launch(self._step_tracked, args)

            cast(EpisodeTracker, episodes).record_by(launch)  # a single-agent environment's tracker
        else:
            self.launch(self._step, [state, episodes.lengths, action, *outputs, n, rng.seed, rng.advance()])
            episodes.record(reward, self.arrays.finished_rows(terminated, truncated))
        return state


MAX_KERNEL_AGENTS = 1 << 23
"""Most agents per environment in a multi-agent kernel: each agent's reset draws use
two 24-bit Philox stream blocks (``msrl_rng.cuh``)."""


class MultiAgentKernelDynamics(KernelDynamics):
    """The dynamics of a ``MultiAgentEnv`` as kernel launches: one block per
    environment, threads striding over its agents, the per-group dicts of
    actions, observations and rewards passed as one array per group (see the
    module docstring).  The episodes are recorded after the launch by
    ``GroupEpisodes`` on the host's arrays, whatever ``Kernels.fuse_episodes``
    says: there is no multi-agent ``name_step_tracked``."""

    def __init__(self, env: MultiAgentKernelEnv, kernels: Kernels, seed: int) -> None:
        super().__init__(env, kernels, seed)
        self.groups = tuple(env.groups)
        self.fuse_episodes = False

    def _layout(self, env: KernelEnv, tpb: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """One block per environment, checked against the layout's agent limit before the
        loader compiles anything."""
        agents = cast(MultiAgentKernelEnv, env).num_agents  # __init__ takes only those
        if agents > MAX_KERNEL_AGENTS:
            raise ConfigError(
                f"{env.env_id} kernels support at most {MAX_KERNEL_AGENTS} agents per environment "
                f"(two 24-bit Philox stream blocks per agent), got {agents}"
            )
        # No more threads than agents: a thread with no agent would only wait at the barriers.
        return (env.num_envs, 1, 1), (min(tpb, agents), 1, 1)

    def observe(self, state: Array, out: dict[str, Array]) -> None:
        self.launch(self._observe, [state, *(out[g] for g in self.groups), self.num_envs])

    def step(
        self,
        state: Array,
        episodes: Episodes,
        action: dict[str, Array],
        obs: dict[str, Array],
        reward: dict[str, Array],
        terminated: Array,
        truncated: Array,
    ) -> Array:
        groups = self.groups
        self.launch(
            self._step,
            [
                state,
                episodes.lengths,
                *(action[g] for g in groups),
                *(obs[g] for g in groups),
                *(reward[g] for g in groups),
                terminated,
                truncated,
                self.num_envs,
                self.rng.seed,
                self.rng.advance(),
            ],
        )
        episodes.record(reward, self.arrays.finished_rows(terminated, truncated))
        return state


__all__ = [
    "KernelDynamics",
    "KernelEnv",
    "Kernels",
    "Launcher",
    "MAX_KERNEL_AGENTS",
    "MultiAgentKernelDynamics",
    "MultiAgentKernelEnv",
    "PhiloxRNG",
]
