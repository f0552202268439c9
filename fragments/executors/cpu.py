"""The ``cpu`` executor: NumPy environments and torch on the CPU, with torch's
intra-op threads sized to the fragment's CPUs (more threads than cores only
adds contention on the small matrices RL policies use)."""

from __future__ import annotations

import torch

from fragments.executors._base import Executor


class CpuExecutor(Executor):
    kind = "cpu"

    def setup(self) -> None:
        torch.set_num_threads(self.spec.cpus)
