"""The ``cpu`` executor: NumPy environments and torch on the CPU.

torch's intra-op threads are sized to the fragment's CPUs, and environments are
built to step a large NumPy batch on that many threads (``msrl.envs`` splits it
into shards; see ``MIN_ENVS_PER_SHARD`` there for where that starts to pay).
"""

from __future__ import annotations

import os

import torch

from fragments.executors._base import Executor
from msrl.core import EnvDefaults
from policies import FragmentSpec


class CpuExecutor(Executor):
    kind = "cpu"
    device_types = ("cpu",)
    device_hint = "device=cpu, or executor=torch (or cuda) for a GPU"

    @classmethod
    def env_defaults(cls, spec: FragmentSpec) -> EnvDefaults:
        return EnvDefaults(backends=cls.env_backends, device="cpu", threads=threads_for(spec))

    def setup(self) -> None:
        torch.set_num_threads(threads_for(self.spec))


def threads_for(spec: FragmentSpec) -> int:
    """The fragment's CPUs, but never more threads than the machine has cores: more only take turns,
    and a million (``cpus: 1000000``) crashed the process creating them."""
    return max(1, min(spec.cpus, os.cpu_count() or 1))
