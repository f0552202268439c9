"""Bootstrapped n-step returns (A2C) and V-trace targets (IMPALA, Espeholt et al. 2018)."""

from __future__ import annotations

import torch


def nstep_returns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """For a (T, N) rollout, ``R_t = r_t + gamma r_t+1 + ... + gamma^(T-t) V(s_T)``: rewards up to the
    end of the rollout or of the episode, bootstrapped from the value after the last step (A2C's
    target, Mnih et al. 2016).  An episode that ended by termination adds nothing after it; one cut
    by a time limit bootstraps from ``V(s_t)``, standing in for the lost final observation (the
    same rule as ``msrl.rl.gae``, with which these returns coincide at ``gae_lambda=1``)."""
    returns = torch.empty_like(rewards)
    following = last_value
    for t in range(rewards.shape[0] - 1, -1, -1):
        bootstrap = torch.where(truncated[t] > 0, values[t], following)
        returns[t] = rewards[t] + gamma * (1.0 - terminated[t]) * bootstrap
        following = returns[t]
    return returns


def vtrace(
    behaviour_logprobs: torch.Tensor,
    target_logprobs: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets ``v_s`` and policy-gradient advantages for a (T, N) trajectory batch
    (IMPALA, Espeholt et al. 2018, section 4.1).

    With ``rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))``, ``c_t = min(c_bar, pi/mu)`` and
    ``delta_t = rho_t (r_t + gamma V(x_t+1) - V(x_t))``::

        v_s = V(x_s) + sum_{t>=s} gamma^(t-s) (prod_{s<=i<t} c_i) delta_t
        advantage_s = rho_s (r_s + gamma v_s+1 - V(x_s))

    computed backwards as ``v_s - V(x_s) = delta_s + gamma c_s (v_s+1 - V(x_s+1))``, with ``V(x_T)
    = last_value``.  Episode ends follow ``msrl.rl.gae``: the sum stops at them; after a
    termination nothing is added, after a time limit ``V(x_t)`` stands in for the lost final
    observation's value.  With ``pi = mu`` and the clips at 1, ``v_s`` is the n-step return.
    The results carry no gradient (they are constants of the loss).
    """
    with torch.no_grad():
        ratios = torch.exp(target_logprobs - behaviour_logprobs)
        rhos = ratios.clamp(max=rho_bar)
        cs = ratios.clamp(max=c_bar)
        next_values = torch.cat((values[1:], last_value.unsqueeze(0)))
        next_values = torch.where(truncated > 0, values, next_values)
        discounts = gamma * (1.0 - terminated)
        deltas = rhos * (rewards + discounts * next_values - values)
        carry = gamma * cs * (1.0 - torch.maximum(terminated, truncated))
        corrections = torch.empty_like(values)
        acc = torch.zeros_like(last_value)
        for t in range(values.shape[0] - 1, -1, -1):
            acc = deltas[t] + carry[t] * acc
            corrections[t] = acc
        vs = values + corrections
        next_vs = torch.cat((vs[1:], last_value.unsqueeze(0)))
        next_vs = torch.where(truncated > 0, values, next_vs)
        advantages = rhos * (rewards + discounts * next_vs - values)
    return vs, advantages
