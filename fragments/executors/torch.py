"""The ``torch`` executor: environment and policy on one torch device.

The environment is rebuilt on its torch backend on the fragment's device, so
inside the rollout loop observations, actions and rewards stay device tensors
and nothing goes back to the host.  (The finite-value check of environment
outputs is skipped on CUDA, where it would force a host sync every step.)
"""

from __future__ import annotations

import torch

import msrl.envs
from fragments.executors._base import Executor


class TorchExecutor(Executor):
    kind = "torch"
    env_backend = "torch"

    def setup(self) -> None:
        self.device = torch.device(self.spec.device)
        torch.set_num_threads(self.spec.cpus)
        self.check_env_outputs = self.device.type == "cpu"
        for name, component in list(self.components.items()):
            spec = getattr(component, "spec", None)
            if self.roles[name] == "env" and spec is not None and spec.backend != self.env_backend:
                self.components[name] = msrl.envs.make(
                    spec.env_id, component.num_envs, seed=spec.seed, backend=self.env_backend, device=str(self.device), **spec.kwargs
                )
