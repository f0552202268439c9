"""A learner's gradient step as one compiled region: the option that switches it on, the wrapper
that compiles and times it, and the optimiser and clipping written as plain tensor functions.

At the sizes of small RL networks on the CPU a gradient step is a few hundred microseconds of
arithmetic behind a millisecond of Python and dispatcher overhead.  The whole step (minibatch
forward, loss, backward, gradient clip, optimiser) becomes one generated kernel set with fixed
shapes: on the CPU built ahead of time by AOTInductor (``msrl.rl._aot``), on CUDA
``torch.compile(fullgraph=True, mode="reduce-overhead")``, replayed as a CUDA graph.  That needs
a step without host syncs (``.item()``, ``.cpu()``, Python branches on tensor values) and without
data-dependent shapes, which ``tests/unit/test_compiled_learner.py`` checks on the CPU, so the
region stays capture-ready without a GPU.

The learning rate and the step count are 0-d tensors, not Python numbers, so an annealed rate
does not recompile the step each update.  Inductor caches what it generates on disk; unless
``TORCHINDUCTOR_CACHE_DIR`` says otherwise, in the user's cache directory
(``$XDG_CACHE_HOME/msrl/torchinductor``, by default ``~/.cache/msrl/torchinductor``) rather than
inductor's default under ``/tmp``, which many systems wipe at boot; the CPU's packages live in its
``aoti`` folder.  A run that finds its package loads it in milliseconds instead of building it for
tens of seconds; ``CompiledStep.compile_seconds`` is what the first call cost, reported apart from
the training time as the learner's ``compile_seconds``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

from msrl.core import ConfigError
from msrl.rl._aot import AheadOfTimeStep


def check_compile_option(value: Any) -> None:
    """Raise ``ConfigError`` unless ``value`` is one of ``auto``, ``true``, ``false``: ``true``
    compiles the learner's step, ``false`` runs it eagerly, ``auto`` compiles on CUDA (as a CUDA
    graph) and not on the CPU, where compiling (seconds with inductor's cache warm, tens cold)
    outweighs what a short run saves (docs/guide.md, "compiled learner")."""
    if value not in ("auto", "true", "false", True, False) or isinstance(value, int) and not isinstance(value, bool):
        raise ConfigError(f"algo.compile must be one of: auto, true, false; got {value!r}")


def compile_mode(option: Any, device: torch.device | str) -> str | None:
    """The ``torch.compile`` mode for ``algo.compile`` on ``device``, or None to run eagerly:
    ``"reduce-overhead"`` (CUDA graphs) on CUDA, ``"default"`` elsewhere."""
    check_compile_option(option)
    on_cuda = torch.device(device).type == "cuda"
    if option in (False, "false") or (option == "auto" and not on_cuda):
        return None
    return "reduce-overhead" if on_cuda else "default"


_REPORTED: set[str] = set()
"""The reasons this process has said a step could not be built for: each is said once."""


class CompiledStep:
    """``fn`` compiled whole (a graph break is an error, not a slow path) with static shapes; the
    seconds its first call took (tracing or loading, code generation, one run) are kept in
    ``compile_seconds``, apart from the time the later calls train.

    On the CPU (``mode="default"``) with inductor, the step is built ahead of time
    (``msrl.rl._aot``: exported, compiled to a library by AOTInductor, cached on disk under
    ``key`` and loaded by later runs in milliseconds); elsewhere, and with ``ahead_of_time=False``,
    it is ``torch.compile(fullgraph=True)``.  Where the step cannot be built (no C++ compiler, an
    operation the exporter refuses), one line says so and the step runs eagerly.  ``mode=None``
    runs ``fn`` as it is, eagerly: the same arithmetic, for the tests that watch every operation it
    dispatches; ``backend="aot_eager"`` traces it as inductor would but skips code generation."""

    def __init__(
        self,
        fn: Callable[..., Any],
        mode: str | None,
        backend: str = "inductor",
        key: str | None = None,
        ahead_of_time: bool = True,
    ) -> None:
        self.fn, self.mode = fn, mode
        self.compiled: Callable[..., Any] = fn
        self.aot: AheadOfTimeStep | None = None
        if mode is not None:
            use_inductor_cache_dir()
            if mode == "default" and backend == "inductor" and ahead_of_time:
                self.aot = AheadOfTimeStep(fn, Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "aoti", key)
                self.compiled = self.aot
            else:
                options: dict[str, Any] = {"mode": mode} if backend == "inductor" else {}
                self.compiled = torch.compile(fn, fullgraph=True, dynamic=False, backend=backend, **options)
        self.compile_seconds = 0.0
        self._warm = mode is None

    def __call__(self, *args: Any) -> Any:
        if self._warm:
            return self._replay(*args) if self.mode == "reduce-overhead" else self.compiled(*args)
        start = time.perf_counter()
        if self.aot is not None:
            try:
                self.aot.prepare(args)
            except Exception as error:  # noqa: BLE001 - any failure to build falls back, with its reason
                reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
                if reason not in _REPORTED:  # one line for the run, not one per step (learner, actor)
                    _REPORTED.add(reason)
                    print(f"msrl: a compiled step could not be built ({reason}); running it eagerly", file=sys.stderr)
                self.compiled, self.aot = self.fn, None
        out = self._replay(*args) if self.mode == "reduce-overhead" else self.compiled(*args)
        self.compile_seconds += time.perf_counter() - start
        self._warm = True
        return out

    def _replay(self, *args: Any) -> Any:
        """A call under ``mode="reduce-overhead"`` (CUDA graphs): the outputs are the graph's own
        memory, which the next replay overwrites, so they are copied (metrics, a gradient for the
        all-reduce: small) before the caller keeps them."""
        return tree_map_only(torch.Tensor, torch.clone, self.compiled(*args))


def keep_in_place(mode: str | None, tensors: Iterable[torch.Tensor]) -> None:
    """Mark the tensors a step updates in place (parameters, optimiser state) as keeping their
    address from call to call: under ``mode="reduce-overhead"`` CUDA graphs then record them where
    they are, where they would otherwise skip a graph whose inputs it mutates."""
    if mode == "reduce-overhead":
        for tensor in tensors:
            torch._dynamo.mark_static_address(tensor)


def inductor_cache_dir() -> Path:
    """Where compiled steps are cached between runs, unless ``TORCHINDUCTOR_CACHE_DIR`` is set."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "msrl" / "torchinductor"


def use_inductor_cache_dir() -> None:
    """Point inductor's cache at ``inductor_cache_dir()`` unless the user chose one.  Importing
    ``torch._dynamo`` (which more than torch.compile does) writes inductor's default, under the
    temporary directory, into ``TORCHINDUCTOR_CACHE_DIR``, so that value counts as unset; inductor
    reads the variable again at each compile."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current is None or os.path.abspath(current) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache_dir())


def clip_grad_(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``grad`` scaled so its L2 norm is at most ``max_norm`` (``msrl.rl.clip_grad_norm_``'s rule,
    coefficient ``max_norm / (norm + 1e-6)`` capped at 1), as a new tensor."""
    norm = torch.linalg.vector_norm(grad)
    return grad * torch.clamp(max_norm / (norm + 1e-6), max=1.0)


def adam_(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: torch.Tensor,
    lr: torch.Tensor,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-5,
) -> None:
    """One step of ``torch.optim.Adam`` (no weight decay, no amsgrad) on ``param`` in place, with
    its state (``exp_avg``, ``exp_avg_sq``, the 0-d float ``step``) as ``torch.optim.Adam`` keeps
    it, so the optimiser's ``state_dict`` stays the checkpoint of either path."""
    beta1, beta2 = betas
    step.add_(1)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias_correction1 = 1 - torch.pow(beta1, step)
    bias_correction2_sqrt = torch.sqrt(1 - torch.pow(beta2, step))
    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    param.sub_(exp_avg / denom * (lr / bias_correction1))


def adam_state(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(exp_avg, exp_avg_sq, step)`` of ``param`` in ``optimizer`` (a ``torch.optim.Adam``),
    created as Adam creates them when it has not stepped yet."""
    state = optimizer.state[param]
    if not state:
        state["step"] = torch.zeros((), dtype=torch.float32, device=param.device)
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    if state["step"].device != param.device:  # a step count eager Adam kept on the host: one copy, then on the device
        state["step"] = state["step"].to(param.device)
    return state["exp_avg"], state["exp_avg_sq"], state["step"]
