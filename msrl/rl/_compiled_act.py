"""An actor's draw as one compiled region: the network's forward pass and what the actor does with
it (sample from a head, take an epsilon-greedy argmax), from noise drawn outside.

A rollout calls ``act`` once per environment step on a few dozen rows.  Eagerly that is some
twenty-five small operations (the two towers, the Gumbel-max draw, the log-probability), each a
few microseconds of arithmetic behind ten of dispatch: about 0.3 ms a call on this project's
2-core VM, a fifth of a compiled PPO iteration and two fifths of an A2C one.  Built ahead of time
(``msrl.rl.CompiledStep`` on the CPU: one package, loaded by later runs in milliseconds) it is one
call into generated C++.

The randomness stays the actor's own: the noise the eager draw would take from the actor's
generator is drawn from it outside the region and passed in (``head.noise`` for the heads'
``sample``), so the compiled and eager paths consume the same random stream and take the same
actions, to float rounding.  The network's parameters and buffers are inputs of the region, so
new weights from the learner (``load_state_dict`` or ``msrl.rl.load_weights``, in place) are seen
at the next call without a rebuild.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from msrl.rl._compiled import CompiledStep
from msrl.rl._twin_mlp import TwinMLP


def head_outputs(net: nn.Module) -> int:
    """The width of the distribution parameters ``net``'s head produces (logits, or Gaussian means)."""
    if isinstance(net, TwinMLP):
        return net.layout.outputs
    return int(cast(Any, net).head.linear.out_features)


def _key(net: nn.Module) -> str | None:
    """A key for the package when ``net`` is one of ``msrl.rl``'s networks (whose sources the key
    covers, with the printed structure and, for ``TwinMLP``, its layout); otherwise None: the
    traced graph itself is the key, which a network defined elsewhere needs."""
    kind = type(net)
    if not kind.__module__.startswith("msrl.rl."):
        return None
    head: Any = cast(Any, net).head
    head = type(head) if isinstance(head, nn.Module) else head
    return f"act:{kind.__module__}.{kind.__qualname__}:{net!r}:{getattr(net, 'layout', None)!r}:{head.__qualname__}"


class _Call(nn.Module):
    """``fn(net, *args)`` as a module, so ``functional_call`` swaps ``net``'s tensors for the region's inputs."""

    def __init__(self, net: nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.net, self.fn = net, fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(self.net, *args)


class CompiledCall:
    """``fn(net, *tensors)`` as one compiled region in ``mode`` (see ``CompiledStep``), with ``net``'s
    parameters and buffers as inputs.  ``fn`` must be whole and free of host syncs and random
    draws: what it would draw is drawn by the caller and passed in.  ``key`` names the package
    (it must then say everything that fixes the traced code); None keys it by the traced graph.

    Example::

        greedy = CompiledCall(q_net, lambda q, obs: q(obs).argmax(-1), "default")
        actions = greedy(obs)
    """

    def __init__(
        self,
        net: nn.Module,
        fn: Callable[..., Any],
        mode: str | None,
        backend: str = "inductor",
        key: str | None = None,
    ) -> None:
        self.net, self.fn = net, fn
        module = _Call(net, fn)
        names = [f"net.{n}" for n, _ in net.named_parameters()] + [f"net.{n}" for n, _ in net.named_buffers()]

        def region(state: tuple[torch.Tensor, ...], *args: torch.Tensor) -> Any:
            return torch.func.functional_call(module, dict(zip(names, state)), args)

        self.step = CompiledStep(region, mode, backend, key=key)
        self._sources: tuple[torch.Tensor, ...] = ()
        self._state: tuple[torch.Tensor, ...] = ()

    @property
    def compile_seconds(self) -> float:
        return self.step.compile_seconds

    def state(self) -> tuple[torch.Tensor, ...]:
        """The network's parameters and buffers (detached), in the order the region takes them.
        Collected once: walking the modules costs more than a small region's arithmetic, and new
        weights arrive in place.  A module moved or cast since has new storage, and is walked again."""
        if not self._sources or self._sources[0].data_ptr() != self._state[0].data_ptr():
            self._sources = (*self.net.parameters(), *self.net.buffers())
            self._state = tuple(t.detach() for t in self._sources)
        return self._state

    def __call__(self, *args: torch.Tensor) -> Any:
        return self.step(self.state(), *args)


def _sample(net: nn.Module, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
    params, value = net(obs)
    action, logprob = cast(Any, net).head.sample(params, None, noise)
    return action, logprob, value


class CompiledAct:
    """``act(obs, generator) -> (action, log_prob, value)`` of an actor-critic ``net`` (an
    ``msrl.rl.ActorCritic`` or ``TwinMLP``): its forward pass and its head's draw as one
    ``CompiledCall``, from the noise its head's ``noise`` draws from ``generator`` (what the eager
    ``sample`` would draw).

    Example::

        compiled = CompiledAct(net, "default")
        action, logprob, value = compiled(obs, generator)
    """

    def __init__(self, net: nn.Module, mode: str | None, backend: str = "inductor") -> None:
        self.call = CompiledCall(net, _sample, mode, backend, key=_key(net))
        self.step, self.state = self.call.step, self.call.state
        self.outputs = head_outputs(net)
        self.head: Any = cast(Any, net).head
        self._rows: int | None = None  # the rows of the last act: the shape the region was built for

    @property
    def compile_seconds(self) -> float:
        return self.call.compile_seconds

    def __call__(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        noise = self.head.noise((obs.shape[0], self.outputs), generator, obs.device, obs.dtype)
        self._rows = obs.shape[0]
        return self.call(obs, noise)

    def value(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The value of ``obs`` from the same region, fed zeros for noise (the value does not read
        it, and nothing is drawn), where ``obs`` has the rows of the last ``act``; else None, rather
        than build a region for another shape (the caller computes it eagerly)."""
        if obs.shape[0] != self._rows:
            return None
        return self.call(obs, torch.zeros((obs.shape[0], self.outputs), device=obs.device, dtype=obs.dtype))[2]
