"""A gradient step of an ordinary ``nn.Module`` loss as one compiled region, through ``torch.func``.

The eager learners call ``loss.backward()``, a gradient-norm clip and ``optimizer.step()``: three
places ``torch.compile`` would break the graph (autograd's engine, the optimiser's Python loop).
Here the same step is a function of tensors: ``torch.func.grad`` of the learner's own loss with
the module's parameters swapped in (``torch.func.functional_call``), the clip, and Adam or
RMSprop written out (``msrl.rl.adam_``, ``rmsprop_``) on the optimiser's own state tensors, so
checkpoints are those of the eager path.  The loss is the learner's code, unchanged: a
researcher still edits it in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from msrl.rl._compiled import CompiledStep, adam_, keep_in_place

Loss = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""``loss(*batch) -> (loss, metrics)``: the scalar to minimise and a 1-d tensor of terms to report."""


class _LossModule(nn.Module):
    """The learner's network and its loss as one module, so ``functional_call`` swaps the
    network's parameters for the traced ones while the loss runs (whatever methods it calls); the
    modules the loss only reads (a target network) are swapped likewise, for inputs of the step
    that are not differentiated, so a compiled step reads their weights at each call."""

    def __init__(self, net: nn.Module, loss: Loss, frozen: Sequence[nn.Module] = ()) -> None:
        super().__init__()
        self.net = net
        self.frozen = nn.ModuleList(frozen)
        self.loss = loss

    def forward(self, *batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.loss(*batch)


def rmsprop_(
    param: torch.Tensor,
    grad: torch.Tensor,
    square_avg: torch.Tensor,
    step: torch.Tensor,
    lr: torch.Tensor,
    alpha: float = 0.99,
    eps: float = 1e-8,
) -> None:
    """One step of ``torch.optim.RMSprop`` (not centred, no momentum, no weight decay) in place,
    with its state as torch keeps it."""
    step.add_(1)
    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    param.sub_(lr * grad / square_avg.sqrt().add_(eps))


def clip_grads(grads: Sequence[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``torch.nn.utils.clip_grad_norm_``'s rule on a list of gradients, as new tensors."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return [g * scale for g in grads]


class CompiledGradientStep:
    """``loss``'s gradient, the clip and the optimiser step on ``net``'s parameters, compiled.

    ``frozen``: the other modules ``loss`` reads (a target network, the critic in an actor's loss),
    whose parameters and buffers enter the step as inputs rather than as constants of a compiled
    library.  ``optimizer`` is the learner's ``torch.optim.Adam`` or ``RMSprop`` (one parameter group, no
    weight decay): its hyper-parameters are read once, its learning rate at every call.  A
    ``max_grad_norm`` of 0 clips nothing.  Calling
    the step returns ``loss``'s metrics tensor.  With ``sync_grads`` (gradients averaged over
    learner copies), the step is two compiled regions with the all-reduce between them.
    """

    def __init__(
        self,
        net: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss: Loss,
        max_grad_norm: float,
        mode: str | None,
        backend: str = "inductor",
        frozen: Sequence[nn.Module] = (),
    ) -> None:
        self.module = _LossModule(net, loss, frozen)
        self.names = [f"net.{name}" for name, _ in net.named_parameters()]
        self.params = list(net.parameters())
        read: list[tuple[str, torch.Tensor]] = [(f"frozen.{n}", t) for n, t in self.module.frozen.named_parameters()]
        read += [(name, t) for name, t in self.module.named_buffers()]
        self.read_names, self.read = [name for name, _ in read], [t for _, t in read]
        self.optimizer = optimizer
        group = optimizer.param_groups[0]
        if isinstance(optimizer, torch.optim.Adam):
            betas, eps = tuple(group["betas"]), float(group["eps"])
            self.state_names: tuple[str, ...] = ("exp_avg", "exp_avg_sq", "step")
            update: Callable[..., None] = lambda p, g, s, lr: adam_(p, g, s[0], s[1], s[2], lr, betas, eps)  # noqa: E731
        elif isinstance(optimizer, torch.optim.RMSprop):
            alpha, eps = float(group["alpha"]), float(group["eps"])
            self.state_names = ("square_avg", "step")
            update = lambda p, g, s, lr: rmsprop_(p, g, s[0], s[1], lr, alpha, eps)  # noqa: E731
        else:
            raise TypeError(f"CompiledGradientStep: Adam or RMSprop, not {type(optimizer).__name__}")

        def grad(params: tuple[torch.Tensor, ...], read: Any, *batch: torch.Tensor) -> tuple[Any, torch.Tensor]:
            def objective(ps: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
                swapped = {**dict(zip(self.read_names, read)), **dict(zip(self.names, ps))}
                return torch.func.functional_call(self.module, swapped, batch)

            return torch.func.grad(objective, has_aux=True)(params)

        def apply(params: tuple[torch.Tensor, ...], grads: Any, states: Any, lr: torch.Tensor) -> None:
            for param, g, state in zip(params, clip_grads(grads, max_grad_norm) if max_grad_norm else grads, states):
                update(param, g, state, lr)

        def step(
            params: tuple[torch.Tensor, ...], read: Any, states: Any, lr: torch.Tensor, *batch: torch.Tensor
        ) -> Any:
            grads, metrics = grad(params, read, *batch)
            apply(params, grads, states, lr)
            return metrics

        self.step, self.grad, self.apply = (CompiledStep(fn, mode, backend) for fn in (step, grad, apply))
        self._detached: tuple[torch.Tensor, ...] = ()

    @property
    def compile_seconds(self) -> float:
        return self.step.compile_seconds + self.grad.compile_seconds + self.apply.compile_seconds

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

    def states(self) -> tuple[tuple[torch.Tensor, ...], ...]:
        """The optimiser's state of each parameter, created as torch creates it before a first step."""
        states = []
        for p in self.params:
            state = self.optimizer.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                for name in self.state_names[:-1]:
                    state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if state["step"].device != p.device:  # a step count eager kept on the host: one copy, then on the device
                state["step"] = state["step"].to(p.device)
            states.append(tuple(state[name] for name in self.state_names))
        return tuple(states)

    @torch.no_grad()  # torch.func.grad differentiates inside; nothing outside records a graph
    def __call__(self, *batch: torch.Tensor, sync_grads: Callable[[list[torch.Tensor]], None] | None = None) -> Any:
        (params, read), states = self._views(), self.states()
        if self.step.mode == "reduce-overhead":
            keep_in_place(self.step.mode, [*params, *(t for state in states for t in state)])
        lr = torch.as_tensor(self.optimizer.param_groups[0]["lr"], dtype=params[0].dtype, device=params[0].device)
        if sync_grads is None:
            return self.step(params, read, states, lr, *batch)
        grads, metrics = self.grad(params, read, *batch)
        sync_grads(list(grads))
        self.apply(params, grads, states, lr)
        return metrics
