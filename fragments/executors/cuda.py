"""The ``cuda`` executor: environment step/reset as CUDA C kernels launched
through pycuda on torch's memory and primary context, policy in torch on the
same GPU.

It is the torch executor whose environments are built on their ``cuda``
backend (``fragments/cuda.py``), or their torch one where they have no kernels;
``check_spec`` refuses a non-cuda device anywhere, and ``check_available`` turns a
missing pycuda or GPU into a one-line error before anything is built.
"""

from __future__ import annotations

from fragments.executors.torch import TorchExecutor
from policies import FragmentSpec


class CudaExecutor(TorchExecutor):
    kind = "cuda"
    env_backends = ("cuda", "torch")
    device_types = ("cuda",)
    device_hint = "device=cuda or cuda:N, or executor=torch (or cpu) on the CPU"

    @classmethod
    def check_available(cls, spec: FragmentSpec) -> None:
        from fragments.cuda import require_cuda

        cls.check_spec(spec)
        require_cuda()
        super().check_available(spec)
