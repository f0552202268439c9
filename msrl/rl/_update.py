"""One gradient step of a learner's loss, written once and run eagerly or as one compiled region.

A learner's update is its loss over ``nn.Module``s and a ``torch.optim`` optimizer.  Eagerly,
``GradientStep`` takes the step every PyTorch user writes: ``loss.backward()``, the gradients
averaged over learner copies, clipped (``clip_grad_norm_``), ``optimizer.step()``.  Compiled, it
takes the same step on the same tensors as one region (``msrl.rl.CompiledRegion``): the same loss
differentiated by ``torch.func.grad`` with the module's parameters swapped in
(``torch.func.functional_call``), the same clip, and torch's own functional form of the optimizer
(``torch.optim.adam.adam``, ``torch.optim.rmsprop.rmsprop``) on the optimizer's own state
tensors.  A researcher edits the loss in one place; checkpoints are the optimizer's
``state_dict`` either way, and a run switches from one to the other between iterations without
a trace in its state.  The network may be anything torch can trace: an MLP, a CNN, a GRU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim.adam import adam
from torch.optim.rmsprop import rmsprop

from msrl.rl._aot import flat_tensors
from msrl.rl._compiled import CompiledRegion, keep_in_place, report_failure

Loss = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""``loss(*batch) -> (loss, metrics)``: the scalar to minimise, and a tensor of terms to report
(detached), which the step returns."""

Sync = Callable[[list[torch.Tensor]], None]
"""Averages a list of tensors over the learner copies, in place (``Learner.sync_mean``)."""


def clip_grad_norm_(grads: Sequence[torch.Tensor | None], max_norm: float) -> torch.Tensor:
    """Scale ``grads`` in place so that their global L2 norm is at most ``max_norm``; return the
    norm before.  ``torch.nn.utils.clip_grad_norm_``'s rule (coefficient ``max_norm / (norm +
    1e-6)``, capped at 1) on the gradients themselves (``None`` skipped), with no host sync, so the
    eager step (``[p.grad for p in params]``) and the compiled one (``torch.func.grad``'s
    gradients) clip through the same function.  The norm is taken tensor by tensor: inductor
    builds those into its own kernels, where ``torch._foreach_norm`` has no C implementation in a
    built package and would call back into torch's dispatcher (a twentieth of a small step)."""
    present = [grad for grad in grads if grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grad) for grad in present]))
    torch._foreach_mul_(present, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


@dataclass(frozen=True)
class _Functional:
    """An optimizer's functional form: the state it keeps per parameter (the names of its
    ``state_dict``, ``step`` last) and ``update(params, grads, states, lr)`` on them in place."""

    state: tuple[str, ...]
    update: Callable[[list[torch.Tensor], list[torch.Tensor], list[tuple[torch.Tensor, ...]], torch.Tensor], None]


def _adam(group: dict[str, Any]) -> _Functional:
    amsgrad = bool(group["amsgrad"])
    state = ("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if amsgrad else ()), "step")
    beta1, beta2 = group["betas"]

    def update(params: list[torch.Tensor], grads: list[torch.Tensor], states: Any, lr: torch.Tensor) -> None:
        adam(
            params,
            grads,
            [s[0] for s in states],
            [s[1] for s in states],
            [s[2] for s in states] if amsgrad else [],
            [s[-1] for s in states],
            foreach=True,
            capturable=True,
            amsgrad=amsgrad,
            beta1=beta1,
            beta2=beta2,
            lr=lr,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
            decoupled_weight_decay=bool(group.get("decoupled_weight_decay", False)),
        )

    return _Functional(state, update)


def _rmsprop(group: dict[str, Any]) -> _Functional:
    centered, momentum = bool(group["centered"]), float(group["momentum"])
    state = ("square_avg", *(("momentum_buffer",) if momentum > 0 else ()), *(("grad_avg",) if centered else ()))
    state = (*state, "step")

    def update(params: list[torch.Tensor], grads: list[torch.Tensor], states: Any, lr: torch.Tensor) -> None:
        rmsprop(
            params,
            grads,
            [s[0] for s in states],
            [s[state.index("grad_avg")] for s in states] if centered else [],
            [s[1] for s in states] if momentum > 0 else [],
            [s[-1] for s in states],
            foreach=True,
            capturable=True,
            maximize=group["maximize"],
            lr=lr,  # type: ignore[arg-type]  # a tensor: torch's capturable form reads it as one
            alpha=group["alpha"],
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            momentum=momentum,
            centered=centered,
        )

    return _Functional(state, update)


FUNCTIONAL_OPTIMIZERS: dict[type[torch.optim.Optimizer], Callable[[dict[str, Any]], _Functional]] = {
    torch.optim.Adam: _adam,
    torch.optim.AdamW: _adam,
    torch.optim.RMSprop: _rmsprop,
}
"""The optimizers a compiled step can take, each by torch's own functional form.  A step with
another optimizer runs eagerly (and says so once)."""


def _functional(optimizer: torch.optim.Optimizer) -> _Functional:
    form = FUNCTIONAL_OPTIMIZERS.get(type(optimizer))
    if form is None:
        choices = ", ".join(kind.__name__ for kind in FUNCTIONAL_OPTIMIZERS)
        raise TypeError(f"a compiled step takes one of {choices}, not {type(optimizer).__name__}")
    if len(optimizer.param_groups) != 1:
        raise TypeError(f"a compiled step takes an optimizer of one parameter group, not {len(optimizer.param_groups)}")
    return form(optimizer.param_groups[0])


class _LossModule(nn.Module):
    """The learner's network and its loss as one module, so ``functional_call`` swaps the
    network's parameters for the traced ones while the loss runs (whatever methods it calls); the
    modules the loss only reads (a target network) are swapped likewise, as inputs of the region
    that are not differentiated, so a compiled step reads their weights at each call."""

    def __init__(self, net: nn.Module, loss: Loss, reads: Sequence[nn.Module] = ()) -> None:
        super().__init__()
        self.net = net
        self.reads = nn.ModuleList(reads)
        self.loss = loss

    def forward(self, *batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.loss(*batch)


class GradientStep:
    """``loss``'s gradient, averaged over learner copies, clipped, and ``optimizer``'s step on
    ``net``'s parameters: ``step(*batch, sync=...) -> metrics``.

    ``reads``: the other modules ``loss`` reads without differentiating (a target network, the
    critic in an actor's loss), whose parameters and buffers enter a compiled step as inputs
    rather than as constants.  ``max_grad_norm`` of 0 clips nothing; ``clip_groups`` (lists of
    ``net``'s parameters) clips each group to it on its own, where one global clip is not the
    algorithm's.  ``compile`` is ``algo.compile`` (``msrl.rl.CompiledRegion``); ``sync`` averages
    the gradients in place (``Learner.sync_mean``), None with one learner.  A step split across
    components (A3C: actors differentiate, the learner applies) calls its halves, ``gradient(*batch)``
    and ``apply(grads)``, each its own compiled region; a step that only differentiates takes no
    ``optimizer`` (None).  ``key`` names the
    compiled region (see ``CompiledRegion``): what fixes the constants ``loss`` reads beyond the
    modules' structure, the optimizer's settings and the clip, which the step adds itself (msrl's
    algorithms pass ``region_key(config)``); without it the region is found by a trace at each run's start.

    Example::

        step = GradientStep(net, torch.optim.Adam(net.parameters(), lr=3e-4), loss, max_grad_norm=0.5)
        metrics = step(obs, actions, advantages, returns)
    """

    def __init__(
        self,
        net: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        loss: Loss,
        max_grad_norm: float = 0.0,
        compile: Any = "auto",
        reads: Sequence[nn.Module] = (),
        clip_groups: Sequence[Sequence[torch.Tensor]] | None = None,
        name: str = "learner",
        key: str | None = None,
    ) -> None:
        self.net, self.optimizer, self.loss, self.max_grad_norm = net, optimizer, loss, max_grad_norm
        self.module = _LossModule(net, loss, reads)
        self.names = [f"net.{name}" for name, _ in net.named_parameters()]
        self.params = list(net.parameters())
        read: list[tuple[str, torch.Tensor]] = [(f"reads.{n}", t) for n, t in self.module.reads.named_parameters()]
        read += list(self.module.named_buffers())
        self.read_names, self.read = [n for n, _ in read], [t for _, t in read]
        index = {id(p): i for i, p in enumerate(self.params)}
        groups = [self.params] if clip_groups is None else clip_groups
        self.clip_groups = [[index[id(p)] for p in group] for group in groups]
        modules = {type(m).__module__ for m in self.module.modules()} | {getattr(loss, "__module__", "")} - {""}
        group = (
            {}
            if optimizer is None
            else {k: v for k, v in optimizer.param_groups[0].items() if k not in ("params", "lr")}
        )
        full_key = None
        if key is not None:  # the network, reads, optimizer and clip as the step holds them, and the owner's key
            setting = (key, repr(self.module), type(optimizer).__name__, group, max_grad_norm, self.clip_groups)
            full_key = repr(setting)
        self.regions = {
            kind: CompiledRegion(
                fn, compile, name, key=None if full_key is None else f"{full_key}/{kind}", modules=modules
            )
            for kind, fn in (("step", self._step), ("grad", self._grad), ("apply", self._apply))
        }
        self._functional: _Functional | None = None
        self._detached: tuple[torch.Tensor, ...] = ()
        self._fixed: list[torch.Tensor] = []  # parameters, read tensors, optimizer state: flattened, kept
        self._fixed_marks: tuple[Any, ...] = ()
        self._lr_tensor = (float("nan"), torch.zeros(()))

    # -- eager ---------------------------------------------------------------------------------------
    def _eager(self, batch: tuple[Any, ...], sync: Sync | None) -> torch.Tensor:
        loss, metrics = self.loss(*batch)
        self._optimizer().zero_grad(set_to_none=True)
        loss.backward()
        self._eager_apply([p.grad for p in self.params], sync)
        return metrics

    def _eager_apply(self, grads: Sequence[torch.Tensor | None], sync: Sync | None) -> None:
        if sync is not None:
            sync([g for g in grads if g is not None])
        self._clip(grads)
        for param, grad in zip(self.params, grads):
            param.grad = grad
        self._optimizer().step()

    def _optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise ValueError("this GradientStep has no optimizer: it computes gradients only (gradient())")
        return self.optimizer

    def _clip(self, grads: Sequence[torch.Tensor | None]) -> None:
        if self.max_grad_norm:
            for group in self.clip_groups:
                clip_grad_norm_([grads[i] for i in group], self.max_grad_norm)

    # -- the compiled region's functions: the same loss, clip and optimizer as functions of tensors ---
    def _grad(self, params: tuple[torch.Tensor, ...], read: tuple[torch.Tensor, ...], *batch: Any) -> Any:
        def objective(ps: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
            swapped = {**dict(zip(self.read_names, read)), **dict(zip(self.names, ps))}
            return torch.func.functional_call(self.module, swapped, batch)

        return torch.func.grad(objective, has_aux=True)(params)

    def _apply(self, params: tuple[torch.Tensor, ...], grads: Any, states: Any, lr: torch.Tensor) -> None:
        grads = list(grads)
        self._clip(grads)
        assert self._functional is not None
        self._functional.update(list(params), grads, list(states), lr)

    def _step(self, params: tuple[torch.Tensor, ...], read: Any, states: Any, lr: torch.Tensor, *batch: Any) -> Any:
        grads, metrics = self._grad(params, read, *batch)
        self._apply(params, grads, states, lr)
        return metrics

    def _views(self) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """The parameters and the read tensors, detached: made once (forty ``detach`` calls a step
        cost more than a small step's arithmetic) and again only when the tensors moved to new
        storage (a module moved or cast: its first tensor tells); updates, ``load_state_dict`` and
        Polyak averaging write in place, which the views see."""
        n = len(self.params)
        firsts = [0, n] if self.read else [0]
        tensors = (*self.params, *self.read)
        if not self._detached or any(tensors[i].data_ptr() != self._detached[i].data_ptr() for i in firsts):
            self._detached = tuple(t.detach() for t in tensors)
        return self._detached[:n], self._detached[n:]

    def _states(self) -> tuple[tuple[torch.Tensor, ...], ...]:
        """The optimizer's state of each parameter, created as torch creates it before a first step."""
        assert self._functional is not None
        states = []
        for p in self.params:
            state = self._optimizer().state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                for name in self._functional.state[:-1]:
                    state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if state["step"].device != p.device:  # a step count eager kept on the host: one copy, to the device
                state["step"] = state["step"].to(p.device)
            states.append(tuple(state[name] for name in self._functional.state))
        return tuple(states)

    def _lr(self, like: torch.Tensor) -> torch.Tensor:
        """The learning rate as a 0-d tensor (an input of the region, so an annealed rate rebuilds
        nothing), made again only when it changed."""
        value = self._optimizer().param_groups[0]["lr"]
        if value != self._lr_tensor[0] or self._lr_tensor[1].device != like.device:
            self._lr_tensor = (value, torch.as_tensor(value, dtype=like.dtype, device=like.device))
        return self._lr_tensor[1]

    def _fixed_leaves(self) -> list[torch.Tensor]:
        """The parameters, read tensors and optimizer state, flattened in the order the region
        takes them, kept from call to call: flattening some fifty tensors costs a fifth of a small
        step.  Made again when one of them moved to new storage (``_views``) or the optimizer's
        state was replaced (``load_state_dict`` makes new tensors)."""
        params, read = self._views()
        state = self._optimizer().state.get(self.params[0])
        first = next(iter(state.values()), None) if state else None
        marks = (params[0], read[0] if read else None, state, first)
        if not self._fixed or any(a is not b for a, b in zip(marks, self._fixed_marks)):
            states = self._states()
            self._fixed = [*params, *read, *(t for s in states for t in s)]
            state = self._optimizer().state[self.params[0]]
            self._fixed_marks = (params[0], read[0] if read else None, state, next(iter(state.values())))
        return self._fixed

    def arguments(self, *batch: Any) -> tuple[Any, ...]:
        """What the compiled region of a step on ``batch`` takes: ``(params, read, states, lr,
        *batch)``, for whoever checks the region (one graph, no host sync) or times it."""
        self._functional = self._functional or _functional(self._optimizer())
        (params, read), states = self._views(), self._states()
        return (params, read, states, self._lr(params[0]), *batch)

    def _start(self, kinds: tuple[str, ...], batch: tuple[Any, ...]) -> None:
        """Start the regions ``kinds`` on this call's arguments (what fixes their shapes)."""
        if kinds == ("grad",):  # a gradient alone reads no optimizer
            with torch.no_grad():
                params, read = self._views()
                self.regions["grad"].start(params, read, *batch)
            return
        try:
            self._functional = _functional(self._optimizer())
        except TypeError as error:
            for kind in kinds:
                self.regions[kind].started = True
            report_failure(error)
            return
        with torch.no_grad():
            params, read, states, lr = self.arguments()
            if "step" in kinds:
                self.regions["step"].start(params, read, states, lr, *batch)
                return
            if "grad" in kinds:
                self.regions["grad"].start(params, read, *batch)
            grads = tuple(torch.zeros_like(p) for p in params)
            self.regions["apply"].start(params, grads, states, lr)

    @property
    def compiled(self) -> bool:
        """Whether the step now runs as its compiled region (``sync``-less or with ``sync``)."""
        return self.regions["step"].ready or (self.regions["grad"].ready and self.regions["apply"].ready)

    def __call__(self, *batch: Any, sync: Sync | None = None) -> torch.Tensor:
        kinds = ("step",) if sync is None else ("grad", "apply")
        regions = [self.regions[kind] for kind in kinds]
        if not all(region.started for region in regions):
            self._start(kinds, batch)
        if not all(region.ready for region in regions):
            return self._eager(batch, sync)
        leaves = getattr(self.regions["step"].runner, "leaves", None)
        if sync is None and leaves is not None:  # the tensors handed over flat: no walk per call
            fixed = self._fixed_leaves()
            return leaves([*fixed, self._lr(fixed[0]), *flat_tensors(batch, [])])
        with torch.no_grad():  # torch.func.grad differentiates inside; nothing outside records a graph
            (params, read), states = self._views(), self._states()
            if params[0].is_cuda:
                keep_in_place([*params, *(t for state in states for t in state)])
            lr = self._lr(params[0])
            if sync is None:
                return self.regions["step"](params, read, states, lr, *batch)
            grads, metrics = self.regions["grad"](params, read, *batch)
            sync(list(grads))
            self.regions["apply"](params, grads, states, lr)
            return metrics

    def gradient(self, *batch: Any) -> tuple[list[torch.Tensor], Any]:
        """The step's first half: ``loss``'s gradient at ``net``'s parameters, and its metrics,
        with nothing stepped; what an actor sends to a learner that ``apply``s it."""
        region = self.regions["grad"]
        if not region.started:
            self._start(("grad",), batch)
        if not region.ready:
            with torch.enable_grad():
                loss, metrics = self.loss(*batch)
                grads = torch.autograd.grad(loss, self.params)
            return list(grads), metrics
        with torch.no_grad():
            params, read = self._views()
            computed, metrics = region(params, read, *batch)
        if params[0].is_cuda:  # a CUDA graph's next replay writes over its outputs: these leave the step
            return [g.clone() for g in computed], metrics
        return list(computed), metrics

    def apply(self, grads: Sequence[torch.Tensor], sync: Sync | None = None) -> None:
        """The step's second half: ``grads`` (one per parameter of ``net``, as ``gradient`` gives
        them, computed here or elsewhere) averaged by ``sync``, clipped, and ``optimizer``'s step.
        ``grads`` are written to in place."""
        region = self.regions["apply"]
        if not region.started:
            self._start(("apply",), ())
        if not region.ready:
            self._eager_apply(list(grads), sync)
            return
        with torch.no_grad():
            (params, _), states = self._views(), self._states()
            if params[0].is_cuda:
                keep_in_place([*params, *(t for state in states for t in state)])
            if sync is not None:
                sync(list(grads))
            region(params, tuple(grads), states, self._lr(params[0]))
