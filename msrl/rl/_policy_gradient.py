"""The advantage actor-critic loss (Mnih et al., 2016): what A2C's learner and A3C's actors
differentiate, written once."""

from __future__ import annotations

import torch

from msrl.rl._actor_critic import ActorCriticNet


def actor_critic_loss(
    net: ActorCriticNet,
    obs: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    vf_coef: float,
    ent_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss to minimise, and its policy, value and entropy terms (detached) to report.

    The policy gradient weighted by ``advantages`` (held fixed), half the squared error of the
    value against ``returns`` (CleanRL's; SB3 weighs the whole squared error, so its ``vf_coef`` is
    this one halved), and an entropy bonus."""
    dist, values = net(obs)
    policy_loss = -(net.head.log_prob(dist, actions) * advantages).mean()
    value_loss = 0.5 * (returns - values).square().mean()
    entropy = net.head.entropy(dist).mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    return loss, torch.stack([policy_loss, value_loss, entropy]).detach()
