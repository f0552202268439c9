"""The ``cpu`` executor: NumPy environments and torch on the CPU.

torch's intra-op threads are sized to the fragment's CPUs, and a large
environment batch is split into one shard per CPU, stepped in a thread pool.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from msrl import ConfigError
from fragments.executors._base import Executor
from fragments.executors._sharded_env import ShardedEnv

MIN_ENVS_PER_SHARD = 16384  # measured on 2 CPUs: 2 shards lose below 16k envs, tie at 16k, win 1.5x at 65k (BENCHMARKS.md)


class CpuExecutor(Executor):
    kind = "cpu"

    @classmethod
    def check_available(cls, spec) -> None:
        if spec.device != "cpu":
            raise ConfigError(f"the cpu executor runs on device cpu, got {spec.device!r}; valid choices: executor=torch or cuda for a GPU")

    def setup(self) -> None:
        torch.set_num_threads(self.spec.cpus)
        self.pool = None
        for name, component in list(self.components.items()):
            if self.roles[name] != "env" or getattr(component, "spec", None) is None:
                continue
            shards = min(self.spec.cpus, component.num_envs // MIN_ENVS_PER_SHARD)
            if shards > 1 and component.spec.backend == "numpy":
                self.pool = self.pool or ThreadPoolExecutor(self.spec.cpus, thread_name_prefix=f"{self.program.fragment}-env")
                self.components[name] = ShardedEnv(component, shards, self.pool)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
