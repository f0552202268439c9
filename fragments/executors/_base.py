"""The executor base: the interpreter over a fragment program (``Interpreter``, in
``_interpreter.py``: ``run()`` -> ``run_node()`` -> one method per op) plus what
differs between executor kinds: the devices they run on, how environments are built
for them, the checks of a spec and of the machine, and threads.  An executor kind
overrides only what differs.  An executor never builds or replaces components: it is
handed the ones built for its fragment, whose environments already follow its
``env_defaults`` (backend, device, threads).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from fragments._program import FragmentProgram
from fragments.executors._interpreter import FragmentExecutionError, Interpreter, Transport
from msrl.core import ConfigError, EnvDefaults, Role
from policies import FragmentSpec

DEVICE_TYPES = ("cpu", "cuda")
"""The torch device types a fragment may name (``cpu``, ``cuda``, ``cuda:N``)."""


def parse_device(spec: FragmentSpec) -> torch.device:
    """The fragment's torch device, or a one-line ``ConfigError`` naming the valid choices."""
    choices = "valid choices: cpu, cuda, cuda:N"
    if not isinstance(spec.device, str):
        raise ConfigError(f"fragment {spec.name!r}: device must be a string, got {spec.device!r}; {choices}")
    try:
        device = torch.device(spec.device)
    except RuntimeError as exc:
        raise ConfigError(f"fragment {spec.name!r}: invalid torch device {spec.device!r}; {choices}") from exc
    if device.type not in DEVICE_TYPES:
        raise ConfigError(f"fragment {spec.name!r}: unsupported device {spec.device!r}; {choices}")
    return device


def threads_for(spec: FragmentSpec) -> int:
    """The fragment's CPUs as a thread count, but never more than the machine has cores: more only
    take turns, and a million (``cpus: 1000000``) crash the process creating them."""
    return max(1, min(spec.cpus, os.cpu_count() or 1))


class Executor(Interpreter):
    """Runs one replica of one fragment.

    ``components`` are the live component objects of this replica (built for it,
    see ``fragments.build_replica``); ``roles`` maps component name to role.
    Subclasses say how environments should be built for them (``env_backends``,
    ``env_defaults``), check a spec anywhere (``check_spec``: the device and its type) and
    the machine where they run (``check_available``), and set up threads
    or devices in ``setup``.
    """

    kind = "base"
    env_backends: tuple[str, ...] = ()
    """Environment backends this executor runs best, in order of preference."""
    device_types: tuple[str, ...] = DEVICE_TYPES
    """The torch device types this executor runs on (``check_spec``)."""
    device_hint = "device=cpu, cuda or cuda:N"
    """What to choose instead when a fragment's device is not one of ``device_types``."""

    def __init__(
        self,
        program: FragmentProgram,
        components: dict[str, Any],
        roles: dict[str, Role],
        spec: FragmentSpec,
        replica: int = 0,
        transport: Transport | None = None,
    ) -> None:
        self.spec = spec  # first: an executor kind may read it to decide what to check
        super().__init__(program, components, roles, replica, transport, check_finite=self.checks_env_outputs())

    @classmethod
    def env_defaults(cls, spec: FragmentSpec) -> EnvDefaults:
        """How environments should be built for a fragment this executor runs."""
        return EnvDefaults(backends=cls.env_backends, device=spec.device, threads=1)

    @classmethod
    def check_spec(cls, spec: FragmentSpec) -> None:
        """Raise ``ConfigError`` with one line if ``spec`` could not run on this executor on any
        machine: a device torch cannot parse, or one of a type this executor does not run on.

        It reads the spec only, never the machine, so the driver checks every fragment with it
        before anything starts, those that will run on other nodes (with GPUs the driver may
        lack) included; ``check_available`` checks the machine where the fragment runs."""
        device = parse_device(spec)
        if device.type not in cls.device_types:
            raise ConfigError(
                f"fragment {spec.name!r}: the {cls.kind} executor runs on device "
                f"{' or '.join(cls.device_types)}, got {spec.device!r}; valid choices: {cls.device_hint}"
            )

    @classmethod
    def check_available(cls, spec: FragmentSpec) -> None:
        """Raise ``ConfigError`` with one line if this machine cannot run ``spec``
        (no GPU, no pycuda), before any component is built.  Includes ``check_spec``."""
        cls.check_spec(spec)
        device = parse_device(spec)
        if device.type != "cuda":
            return
        if not torch.cuda.is_available():
            raise ConfigError(
                f"fragment {spec.name!r} asks for device {spec.device!r} but torch sees no CUDA GPU; use device=cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"fragment {spec.name!r} asks for device {spec.device!r} but torch sees "
                f"{torch.cuda.device_count()} GPU(s) here; valid choices: cuda, "
                f"{', '.join(f'cuda:{i}' for i in range(torch.cuda.device_count()))}"
            )

    def checks_env_outputs(self) -> bool:
        """Whether environment outputs are checked for NaN/inf every step (not where the
        check would cost a device-to-host sync per step)."""
        return True

    def setup(self) -> None:
        """Prepare threads/devices; called once before the first ``run``.  Every executor sizes
        torch's intra-op threads to the fragment's CPUs, capped here once (``threads_for``); a
        subclass that overrides this calls it."""
        torch.set_num_threads(threads_for(self.spec))

    def close(self) -> None:
        """Release what the components hold (threads, devices)."""
        for component in self.components.values():
            component.close()


__all__ = ["DEVICE_TYPES", "Executor", "FragmentExecutionError", "Transport", "parse_device", "threads_for"]
