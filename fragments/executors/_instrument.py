"""The measurements around an executor's interpreter: wall time per phase (env,
inference, learn, buffer, communication), environment steps, and the check
that environments return finite values (from step, reset and observe) and learners finite weights.

They live in one hook, called around every node and every transfer, so the
interpreter's op methods stay what the graph says and nothing else.  Built once
per fragment program: which phase a node times into, and how many environment
steps it takes, are looked up by node name, not worked out per call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from msrl.core import Deferred, DivergenceError, EnvError, Node, Op, Role, iter_leaves

PHASE_OF_ROLE: dict[Role, str] = {
    Role.ENV: "env",
    Role.ACTOR: "inference",
    Role.LEARNER: "learn",
    Role.BUFFER: "buffer",
    Role.COMPONENT: "other",
}
STEP_OUTPUTS = ("obs", "reward", "terminated", "truncated")


class Instrumentation:
    """Times component calls into their role's phase, counts the environment steps of
    every ``env.step`` node (and the transitions of every ``sample`` of a buffer that says how many
    it draws, ``steps_per_sample``: a dataset's) and, if ``check_finite``, rejects NaN/inf in what
    an environment returns."""

    def __init__(
        self, nodes: list[Node], components: dict[str, Any], roles: dict[str, Role], check_finite: bool
    ) -> None:
        self.timings: dict[str, float] = {}
        self.env_steps = 0
        roles = {component: Role.parse(role) for component, role in roles.items()}
        calls = [(n.name, n.target[0], n.target[1]) for n in nodes if n.op is Op.CALL_COMPONENT]
        self._phase = {name: PHASE_OF_ROLE[roles[component]] for name, component, _ in calls}
        self._steps = {
            name: components[component].num_envs
            for name, component, method in calls
            if roles[component] is Role.ENV and method == "step"
        }
        # a dataset's sample stands for the transitions it draws: an offline run's steps
        self._samples = {
            name: int(components[component].steps_per_sample)
            for name, component, method in calls
            if roles[component] is Role.BUFFER
            and method == "sample"
            and getattr(components[component], "steps_per_sample", 0) > 0
        }
        self._observations = {
            name for name, component, method in calls if roles[component] is Role.ENV and method in ("reset", "observe")
        }
        self._finite = check_finite
        self._weights = {
            name for name, component, method in calls if roles[component] is Role.LEARNER and method == "get_weights"
        }
        self.profile: NodeProfile | None = None
        """Where set (``profile_nodes``), each call's seconds and the bytes it returned, by node."""

    def around(self, node: Node, run: Callable[[Node, tuple, dict], Any], args: tuple, kwargs: dict) -> Any:
        """Run ``run(node, args, kwargs)``, measured."""
        phase = self._phase.get(node.name)
        if phase is None:  # call_function and output nodes: too small to time
            return run(node, args, kwargs)
        component, method = node.target  # a call_component node's
        start = time.perf_counter()
        result = run(node, args, kwargs)
        seconds = time.perf_counter() - start
        self.timings[phase] = self.timings.get(phase, 0.0) + seconds
        if self.profile is not None:
            self.profile.add(node.name, seconds, result)
        for value in result:
            if type(value) is Deferred:
                value.phase = phase  # computed later, but counted as this component's time
        if self._finite and node.name in self._weights:
            check_weights(result, component)
        steps = self._steps.get(node.name)
        if steps is not None:
            self.env_steps += steps
            if self._finite:
                check_finite(result, component)
        elif node.name in self._samples:
            self.env_steps += self._samples[node.name]
        elif self._finite and node.name in self._observations:
            check_finite(result[:1], component, method)  # the observations (reset's info is not checked)
        return result

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Count the block's wall time as ``phase`` (communication, a deferred value's phase)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - start

    def take(self) -> tuple[dict[str, float], int]:
        """Phase timings and environment steps since the last call."""
        timings, steps = self.timings, self.env_steps
        self.timings, self.env_steps = {}, 0
        return timings, steps


class NodeProfile:
    """Seconds of every component call node (its calls summed) and the bytes of each output of its
    last call: what the cost model (``fragments.predict``) needs of a measured iteration."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.output_bytes: dict[str, list[int]] = {}

    def add(self, node: str, seconds: float, outputs: tuple) -> None:
        self.seconds[node] = self.seconds.get(node, 0.0) + seconds
        if node not in self.output_bytes:  # a node's outputs keep their shapes from call to call
            self.output_bytes[node] = [value_bytes(value) for value in outputs]


def value_bytes(value: Any) -> int:
    """The bytes a value takes in a message: its arrays' and tensors' data, 8 a number, a string's
    length (what pickling adds around them is left out)."""
    total = 0
    for leaf in iter_leaves(value):
        if isinstance(leaf, torch.Tensor):
            total += leaf.element_size() * leaf.numel()
        elif isinstance(leaf, np.ndarray):
            total += leaf.nbytes
        elif isinstance(leaf, (str, bytes)):
            total += len(leaf)
        elif isinstance(leaf, (int, float, bool, np.generic)):
            total += 8
        elif type(leaf) is Deferred:
            total += 8  # diagnostics: a few numbers
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            total += value_bytes([getattr(leaf, f.name) for f in dataclasses.fields(leaf)])
    return total


def check_weights(values: tuple, component: str) -> None:
    """Stop at the first update that left a learner's weights NaN or inf: training on would log nan
    for every loss to the end of the run and overwrite the last good checkpoint.

    One sum per tensor and one host sync per device and dtype: a sum of floats is finite only
    where every term is (an inf or NaN term keeps any sum non-finite), so finite sums settle it;
    a non-finite one (possibly an overflow of finite terms) is checked element by element."""
    tensors = [leaf for leaf in iter_leaves(values) if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()]
    sums: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        sums.setdefault((tensor.device, tensor.dtype), []).append(tensor.sum())
    if all(bool(torch.stack(group).isfinite().all()) for group in sums.values()):
        return
    for leaf in tensors:
        if not bool(torch.isfinite(leaf).all()):
            raise DivergenceError(
                f"learner {component!r} has non-finite weights (NaN or inf) after its update; "
                f"the run stops here, its last checkpoint kept: lower algo.learning_rate or look "
                f"at the losses in metrics.jsonl"
            )


def check_finite(values: tuple, component: str, method: str = "step") -> None:
    """Reject NaN/inf in an environment's outputs (``step``'s, or the observations of ``reset`` and
    ``observe``): training on them silently ruins the run."""
    for index, value in enumerate(values):
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            ok = bool(np.isfinite(value).all())
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            ok = bool(torch.isfinite(value).all())
        else:
            continue
        if not ok:
            name = STEP_OUTPUTS[index] if index < len(STEP_OUTPUTS) else f"output {index}"
            raise EnvError(
                f"environment {component!r} returned a non-finite {name} (NaN or inf) from {method}(); "
                f"fix the environment or its inputs"
            )
