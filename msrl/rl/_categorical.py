"""Categorical sampling without torch.distributions' per-call overhead, which
dominates inference for the small batches of a rollout step."""

from __future__ import annotations

import torch


def sample_categorical(
    logits: torch.Tensor, generator: torch.Generator | None = None, uniform: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one action per row (Gumbel-max) and return ``(action, log_prob)``.  ``uniform``
    (``logits``' shape, in [0, 1)) is drawn from ``generator`` unless given: a compiled region
    takes it drawn outside (``categorical_noise``), as the eager path would draw it."""
    if uniform is None:
        uniform = categorical_noise(logits.shape, generator, logits.device, logits.dtype).clamp_(min=1e-20)
    else:  # the caller's draw stays as it was
        uniform = uniform.clamp(min=1e-20)
    gumbel = -torch.log(-torch.log(uniform))
    action = torch.argmax(logits + gumbel, dim=-1)
    return action, categorical_log_prob(logits, action)


def categorical_noise(
    shape: torch.Size | tuple[int, ...],
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The uniform draw ``sample_categorical`` makes for logits of ``shape``."""
    return torch.rand(shape, generator=generator, device=device, dtype=dtype)


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, dim=-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


def one_hot(index: torch.Tensor, classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``index`` one-hot over ``classes`` (a new last dimension), made by comparison: unlike
    ``torch.nn.functional.one_hot`` it does not check its values against ``classes``, a
    data-dependent check that a compiled step cannot hold."""
    return (index.long().unsqueeze(-1) == torch.arange(classes, device=index.device)).to(dtype)
