"""The ``cpu`` executor: NumPy environments and torch on the CPU.

torch's intra-op threads are sized to the fragment's CPUs, and environments are
built to step a large NumPy batch on that many threads (``msrl.envs`` splits it
into shards; see ``MIN_ENVS_PER_SHARD`` there for where that starts to pay).
"""

from __future__ import annotations

import torch

from msrl.core import ConfigError, EnvDefaults
from fragments.executors._base import Executor
from policies import FragmentSpec


class CpuExecutor(Executor):
    kind = "cpu"

    @classmethod
    def env_defaults(cls, spec: FragmentSpec) -> EnvDefaults:
        return EnvDefaults(backends=cls.env_backends, device="cpu", threads=spec.cpus)

    @classmethod
    def check_available(cls, spec: FragmentSpec) -> None:
        if spec.device != "cpu":
            raise ConfigError(f"the cpu executor runs on device cpu, got {spec.device!r}; valid choices: executor=torch or cuda for a GPU")

    def setup(self) -> None:
        torch.set_num_threads(self.spec.cpus)
