"""The ``cpu`` executor: NumPy environments and torch on the CPU.

torch's intra-op threads are sized to the fragment's CPUs (capped at the
machine's cores by ``Executor.setup``), and environments are built to step a
large NumPy batch on that many threads (``msrl.envs`` splits it into shards;
see ``MIN_ENVS_PER_SHARD`` there for where that starts to pay).
"""

from __future__ import annotations

from fragments.executors._base import Executor, threads_for
from msrl.core import EnvDefaults
from policies import FragmentSpec


class CpuExecutor(Executor):
    kind = "cpu"
    device_types = ("cpu",)
    device_hint = "device=cpu, or executor=torch (or cuda) for a GPU"

    @classmethod
    def env_defaults(cls, spec: FragmentSpec) -> EnvDefaults:
        return EnvDefaults(backends=cls.env_backends, device="cpu", threads=threads_for(spec))


class CpuKernelExecutor(CpuExecutor):
    """The ``cpu`` executor with environments on the ``cpu-kernel`` backend where one has it
    (those whose registration names a kernel source: the CUDA kernels compiled natively for the
    CPU, float32 state as on a GPU), NumPy elsewhere.  Where the kernels cannot be built (no
    C++ compiler, a failed build) the environments run on NumPy after one line saying so
    (``fragments.native``)."""

    kind = "cpu-kernel"
    env_backends = ("cpu-kernel",)
