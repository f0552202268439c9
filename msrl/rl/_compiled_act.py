"""An actor's ``act`` as one compiled region: the network's forward pass and its head's draw.

A rollout calls ``act`` once per environment step on a few dozen rows.  Eagerly that is some
twenty-five small operations (the two towers, the Gumbel-max draw, the log-probability), each a
few microseconds of arithmetic behind ten of dispatch: about 0.3 ms a call on this project's
2-core VM, a fifth of a compiled PPO iteration and most of an A2C one.  Built ahead of time
(``msrl.rl.CompiledStep`` on the CPU: one package, loaded by later runs in milliseconds) it is one
call into generated C++.

The randomness stays the actor's own: the noise the head's ``sample`` would draw is drawn from the
actor's generator outside the region (``head.noise``) and passed in, so the compiled and eager
paths consume the same random stream and sample the same actions, to float rounding.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from msrl.rl._compiled import CompiledStep
from msrl.rl._twin_mlp import TwinMLP, _forward


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


class CompiledAct:
    """``act(obs, generator) -> (action, log_prob, value)`` of an actor-critic ``net`` (an
    ``msrl.rl.ActorCritic`` or ``TwinMLP``), compiled in ``mode`` (see ``CompiledStep``); the
    network's parameters and buffers are inputs of the region, so ``load_state_dict`` (new
    weights from the learner) is seen at the next call without a rebuild.

    Example::

        compiled = CompiledAct(net, "default")
        action, logprob, value = compiled(obs, generator)
    """

    def __init__(self, net: nn.Module, mode: str | None, backend: str = "inductor") -> None:
        self.net = net
        self.outputs = head_outputs(net)
        self.head: Any = cast(Any, net).head
        head = self.head
        if isinstance(net, TwinMLP):
            layout = net.layout

            def forward(state: tuple[torch.Tensor, ...], obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
                logits, value, _, _ = _forward(obs, layout.split(state[0]), layout)
                return logits, value

        else:
            names = [name for name, _ in net.named_parameters()] + [name for name, _ in net.named_buffers()]

            def forward(state: tuple[torch.Tensor, ...], obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
                return torch.func.functional_call(net, dict(zip(names, state)), (obs,))

        def act(state: tuple[torch.Tensor, ...], obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
            params, value = forward(state, obs)
            action, logprob = head.sample(params, None, noise)
            return action, logprob, value

        self.step = CompiledStep(act, mode, backend, key=_key(net))
        self._sources: tuple[torch.Tensor, ...] = ()
        self._state: tuple[torch.Tensor, ...] = ()

    @property
    def compile_seconds(self) -> float:
        return self.step.compile_seconds

    def state(self) -> tuple[torch.Tensor, ...]:
        """The network's parameters and buffers (detached), in the order the region takes them.
        Collected once: walking the modules costs more than the region's arithmetic, and the
        learner's weights arrive by ``load_state_dict``, in place.  A module moved or cast since
        has new storage, and is walked again."""
        if not self._sources or self._sources[0].data_ptr() != self._state[0].data_ptr():
            if isinstance(self.net, TwinMLP):
                self._sources = (self.net.params,)
            else:
                self._sources = (*self.net.parameters(), *self.net.buffers())
            self._state = tuple(t.detach() for t in self._sources)
        return self._state

    def __call__(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        noise = self.head.noise((obs.shape[0], self.outputs), generator, obs.device, obs.dtype)
        return self.step(self.state(), obs, noise)
