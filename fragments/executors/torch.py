"""The ``torch`` executor: environment and policy on one torch device.

Environments built for it use their torch backend on the fragment's device
(where they have one), so inside the rollout loop observations, actions and
rewards stay device tensors and nothing goes back to the host.  The finite-value
check of environment outputs is skipped on CUDA, where it would force a host
sync every step.  torch's threads are set (and capped) by ``Executor.setup``.
"""

from __future__ import annotations

import torch

from fragments.executors._base import Executor


class TorchExecutor(Executor):
    kind = "torch"
    env_backends: tuple[str, ...] = ("torch",)

    def checks_env_outputs(self) -> bool:
        return torch.device(self.spec.device).type == "cpu"
