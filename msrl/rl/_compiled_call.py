"""A function of a network's forward pass as one compiled region: an actor's draw (sample from a
head, take an epsilon-greedy argmax) from noise drawn outside.

A rollout calls ``act`` once per environment step on a few dozen rows.  Eagerly that is some
twenty-five small operations (the network, the Gumbel-max draw, the log-probability), each a few
microseconds of arithmetic behind ten of dispatch; built ahead of time it is one call into
generated C++ (``msrl.rl.CompiledRegion``).

The randomness stays the caller's own: the noise the draw takes is drawn from the actor's
generator outside the region and passed in, the same way eagerly and compiled, so both consume
the same random stream and take the same actions, to float rounding.  The network's parameters
and buffers are inputs of the region, so new weights from the learner (``load_state_dict`` or
``msrl.rl.load_weights``, in place) are seen at the next call without a rebuild.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from msrl.rl._compiled import CompiledRegion


class _Call(nn.Module):
    """``fn(net, *args)`` as a module, so ``functional_call`` swaps ``net``'s tensors for the region's inputs."""

    def __init__(self, net: nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.net, self.fn = net, fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(self.net, *args)


class CompiledCall:
    """``fn(net, *tensors)``, eagerly until its compiled region (``msrl.rl.CompiledRegion``, with
    ``net``'s parameters and buffers as inputs) is ready.  ``fn`` must be whole and free of host
    syncs and random draws: what it would draw, the caller draws and passes in.  On CUDA it stays
    eager: a CUDA graph's outputs are overwritten by its next replay, and a rollout keeps them.

    ``key`` names the region (see ``CompiledRegion``): what fixes the constants ``fn`` reads beyond
    ``net``'s structure, which the call adds itself (msrl's algorithms pass ``region_key(config)``).

    Example::

        greedy = CompiledCall(q_net, lambda q, obs: q(obs).argmax(-1), compile="auto")
        actions = greedy(obs)
    """

    def __init__(
        self,
        net: nn.Module,
        fn: Callable[..., Any],
        compile: Any = "auto",
        name: str = "actor",
        key: str | None = None,
    ) -> None:
        self.net, self.fn = net, fn
        module = _Call(net, fn)
        names = [f"net.{n}" for n, _ in net.named_parameters()] + [f"net.{n}" for n, _ in net.named_buffers()]

        def region(state: tuple[torch.Tensor, ...], *args: torch.Tensor) -> Any:
            return torch.func.functional_call(module, dict(zip(names, state)), args)

        modules = {type(m).__module__ for m in net.modules()} | {getattr(fn, "__module__", "")} - {""}
        full_key = None if key is None else repr((key, repr(net), getattr(fn, "__qualname__", "")))
        self.region = CompiledRegion(region, compile, name, cuda_graphs=False, key=full_key, modules=modules)
        self._sources: tuple[torch.Tensor, ...] = ()
        self._state: tuple[torch.Tensor, ...] = ()

    @property
    def ready(self) -> bool:
        return self.region.ready

    def state(self) -> tuple[torch.Tensor, ...]:
        """The network's parameters and buffers (detached), in the order the region takes them.
        Collected once: walking the modules costs more than a small region's arithmetic, and new
        weights arrive in place.  A module moved or cast since has new storage, and is walked again."""
        if not self._sources or self._sources[0].data_ptr() != self._state[0].data_ptr():
            self._sources = (*self.net.parameters(), *self.net.buffers())
            self._state = tuple(t.detach() for t in self._sources)
        return self._state

    def __call__(self, *args: torch.Tensor) -> Any:
        region = self.region
        if not region.started:
            region.start(self.state(), *args)
        if region.runner is not None:
            leaves = getattr(region.runner, "leaves", None)  # the tensors handed over flat: no walk per call
            return leaves([*self.state(), *args]) if leaves is not None else region(self.state(), *args)
        return self.fn(self.net, *args)
