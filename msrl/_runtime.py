"""What the run loop needs from a runtime, whichever process layout backs it.

``fragments.LocalRuntime`` runs everything in the driver; the Ray runtime in
``cluster`` runs fragment replicas as actors.  The run loop only sees this
interface, so it never needs to know about Ray.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class IterationResult:
    output: Any
    component_metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    env_steps: int = 0


class Runtime(Protocol):
    def run_iteration(self, more: bool = False) -> IterationResult:
        """``more``: another call follows with no ``state_dict``/``load_state_dict`` in between,
        so the runtime may start the next iteration early."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def make_runtime(fdg: Any, algorithm: Any, address: str | None = None, config: Any = None) -> Runtime:
    """The runtime for a policy: in-process for ``local``, Ray otherwise.
    ``cluster`` is imported only here, so msrl itself never imports Ray."""
    if fdg.policy.in_process:
        from fragments._local import LocalRuntime

        return LocalRuntime(fdg, algorithm)
    cluster = importlib.import_module("cluster")
    return cluster.RayRuntime(fdg, algorithm, address=address, config=config)
