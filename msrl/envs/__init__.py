"""Batched environments by name (the registry of their backends is ``msrl.envs._registry``).

Each environment msrl builds in lives in one folder of this package
(``msrl/envs/pendulum/``: its NumPy and torch physics, its CUDA C kernel source as
a data file, and its ``REGISTRATION``); adding one touches its folder and nothing
else.  What environments share stays here: the batched base (``BatchedEnv``),
episode tracking, the array backends, kernel dynamics and the headers every kernel
source may include (``KERNEL_HEADERS``: the episode and random-number helpers).

One environment id (``"CartPole-v1"``) can have several backends: ``numpy``
(CPU), ``torch`` (any torch device), ``cuda`` (CUDA C kernels through pycuda)
and ``cuda-emulated`` (the same kernels run on the CPU).  Backends of one
environment agree step for step; ``msrl.envs.consistency`` checks it.  An id
that msrl does not build in is made through gymnasium (backend
``gymnasium``), and a user registers an environment of their own with one call
to ``register``.
Families of ids another package provides are built in the same way, one folder each
(``msrl.envs.EnvFamily``): ``"ALE/Pong-v5"`` and every Atari game ale-py ships (backend ``ale``,
``msrl/envs/atari/``; ``pip install "msrl[atari]"``), ``"MinAtar/Breakout-v1"`` and the other
MinAtar games (backend ``minatar``, ``msrl/envs/minatar/``).  Their observations are uint8 frames.
A PettingZoo parallel environment is made by naming its module:
``"pettingzoo:mpe2.simple_tag_v3"`` imports ``mpe2.simple_tag_v3`` and steps copies
of its ``parallel_env(**kwargs)`` (backend ``pettingzoo``, ``msrl.envs._pettingzoo``).

Backends are registered by name and imported when first built.  Backends that
live in other packages (the CUDA ones, in ``fragments``, which ``msrl.envs``
must not import) are plug-ins: a package lists a function under the
``msrl.env_backends`` entry point of its distribution, and ``msrl.envs`` calls
it with ``register`` the first time it needs a backend it does not know yet.

Inside the package imports point one way (``tests/unit/test_env_imports.py``
checks it): the registry names environment modules as strings and imports
them when first built; each environment's NumPy and torch physics import a
shared ``_base`` module of its folder (its constants, checks and spaces), not
each other; the public class (``msrl.envs.tag.Tag``) joins them.

``make`` picks the backend the algorithm asks for; when it asks for none, the
``defaults`` it is given choose: an algorithm passes ``run.env_defaults``, the
preferences of the executor that runs its fragment (``msrl.core.EnvDefaults``:
the torch executor prefers ``torch`` on its device, the cpu executor steps large
NumPy batches on several threads), and otherwise the environment's default
(``numpy`` where there is one).  Device and threads reach the environment the
same way, as parameters.

Example::

    >>> import msrl.envs
    >>> env = msrl.envs.make("CartPole-v1", num_envs=4, seed=0)
    >>> env.reset().shape
    (4, 4)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from msrl.envs._registry import (
    MIN_ENVS_PER_SHARD,
    PLUGIN_GROUP,
    Backend,
    EnvFamily,
    EnvRegistration,
    EnvSpec,
    backends,
    env_ids,
    families,
    kernel_sources,
    make,
    register,
    registrations,
    spec,
)
from msrl.envs._sharded import ShardedEnv

KERNEL_HEADERS = Path(__file__).resolve().parent
"""The folder of the headers every kernel source may include (``msrl_common.cuh``,
``msrl_episodes.cuh``, ``msrl_rng.cuh``): what ``fragments`` puts on the include path."""

# The environment base and its parts, imported on first use (they pull in torch).
_LAZY_NAMES = {
    "ActionCheck": "msrl.envs._actions",
    "ArrayBackend": "msrl.envs._arrays",
    "BatchedEnv": "msrl.envs._base",
    "EpisodeTracker": "msrl.envs._episodes",
    "GroupEpisodes": "msrl.envs._episodes",
    "GymnasiumEnv": "msrl.envs._gymnasium",
    "HostDynamics": "msrl.envs._base",
    "KernelDynamics": "msrl.envs._kernels",
    "Kernels": "msrl.envs._kernels",
    "Launcher": "msrl.envs._kernels",
    "MAX_KERNEL_AGENTS": "msrl.envs._kernels",
    "MultiAgentEnv": "msrl.envs._multi_agent",
    "MultiAgentKernelDynamics": "msrl.envs._kernels",
    "NumpyArrays": "msrl.envs._numpy_arrays",
    "Physics": "msrl.envs._base",
    "PettingZooEnv": "msrl.envs._pettingzoo",
    "group_of": "msrl.envs._pettingzoo",
    "PhiloxRNG": "msrl.envs._kernels",
    "TorchArrays": "msrl.envs._torch_arrays",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(_LAZY_NAMES[name]), name)
    raise AttributeError(f"module 'msrl.envs' has no attribute {name!r}")


__all__ = [
    "ActionCheck",
    "ArrayBackend",
    "Backend",
    "BatchedEnv",
    "EnvFamily",
    "EnvRegistration",
    "EnvSpec",
    "EpisodeTracker",
    "GroupEpisodes",
    "GymnasiumEnv",
    "HostDynamics",
    "KERNEL_HEADERS",
    "KernelDynamics",
    "Kernels",
    "Launcher",
    "MAX_KERNEL_AGENTS",
    "MIN_ENVS_PER_SHARD",
    "MultiAgentEnv",
    "MultiAgentKernelDynamics",
    "NumpyArrays",
    "PLUGIN_GROUP",
    "PettingZooEnv",
    "group_of",
    "Physics",
    "PhiloxRNG",
    "ShardedEnv",
    "TorchArrays",
    "backends",
    "env_ids",
    "families",
    "kernel_sources",
    "make",
    "register",
    "registrations",
    "spec",
]
