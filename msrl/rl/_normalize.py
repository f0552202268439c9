"""Running mean and variance, for observation and reward normalisation (SB3's ``VecNormalize``,
gymnasium's ``NormalizeObservation`` / ``NormalizeReward``).

They are plain objects held by components (an actor normalises what it observes, a buffer scales
the rewards it stores), so their statistics travel in that component's ``state_dict`` and a run
resumes with exactly the statistics it stopped with.
"""

from __future__ import annotations

from typing import Any

import torch


class RunningMeanStd:
    """Mean and variance of everything passed to ``update``, merged batch by batch with Chan et
    al.'s parallel formula (exact up to rounding, in float64).

    ``normalize(x)`` is ``clip((x - mean) / sqrt(var + eps), -clip, clip)``.
    """

    def __init__(
        self, shape: tuple[int, ...] = (), epsilon: float = 1e-8, clip: float = 10.0, device: str | torch.device = "cpu"
    ) -> None:
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count: int | float = 0  # a float once copies have averaged unequal shares (update_from_sums)
        self.epsilon, self.clip = epsilon, clip

    def update(self, x: torch.Tensor) -> None:
        """Fold in a batch whose leading axis is the sample axis."""
        x = torch.as_tensor(x, device=self.mean.device).to(torch.float64).reshape((-1,) + tuple(self.mean.shape))
        n = x.shape[0]
        if n == 0:
            return
        self._merge(x.mean(0), x.var(0, unbiased=False), n)

    def batch_sums(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, sum(x - mean), sum((x - mean)^2)]`` of a batch (float64, flattened), centred on the
        current mean.  Sums add up across the parts of a batch, so copies that share statistics can
        average theirs (``Learner.sync_mean``) and fold in the moments of the whole batch:
        ``update_from_sums`` gives the same mean and variance from the average of the parts' sums
        as from the sums of the whole (the count grows by the average, which keeps every batch's
        weight relative to the history the same)."""
        x = torch.as_tensor(x, device=self.mean.device).to(torch.float64).reshape((-1,) + tuple(self.mean.shape))
        centred = x - self.mean
        count = torch.full((1,), float(x.shape[0]), dtype=torch.float64, device=self.mean.device)
        return torch.cat([count, centred.sum(0).reshape(-1), centred.square().sum(0).reshape(-1)])

    def update_from_sums(self, sums: torch.Tensor) -> None:
        """Fold in the batch whose ``batch_sums`` (or their average over copies) are ``sums``."""
        size = self.mean.numel()
        n = float(sums[0])
        n = int(n) if n.is_integer() else n  # copies' equal shares average to a whole count
        if n <= 0:
            return
        shift = (sums[1 : 1 + size] / n).reshape(self.mean.shape)
        batch_mean = self.mean + shift
        batch_var = ((sums[1 + size :] / n).reshape(self.mean.shape) - shift.square()).clamp_(min=0.0)
        self._merge(batch_mean, batch_var, n)

    def _merge(self, batch_mean: torch.Tensor, batch_var: torch.Tensor, n: int | float) -> None:
        """Chan et al.'s parallel update: fold a batch of ``n`` samples with these moments in."""
        if self.count == 0:
            self.mean, self.var, self.count = batch_mean, batch_var, n
            return
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.var = (self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)) / total
        self.count = total

    def fold_in(self, state: dict[str, Any]) -> None:
        """Fold in the statistics another one saved (``state_dict``): the moments of both sets of samples."""
        count = float(state["count"])
        if count > 0:
            device = self.mean.device
            self._merge(state["mean"].to(device, torch.float64), state["var"].to(device, torch.float64), count)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x)
        mean, std = self.mean.to(x.device, torch.float32), (self.var + self.epsilon).sqrt().to(x.device, torch.float32)
        return ((x.to(torch.float32) - mean) / std).clamp_(-self.clip, self.clip)

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["mean"].shape) != tuple(self.mean.shape):
            raise ValueError(
                f"running statistics of shape {tuple(state['mean'].shape)}, expected {tuple(self.mean.shape)}"
            )
        self.mean = state["mean"].to(self.mean.device, torch.float64).clone()
        self.var = state["var"].to(self.var.device, torch.float64).clone()
        count = float(state["count"])
        self.count = int(count) if count.is_integer() else count


class RewardScaler:
    """Divides rewards by the running standard deviation of each environment's discounted return
    (SB3's ``VecNormalize(norm_reward=True)``): the return estimate restarts at episode ends and the
    rewards are not centred, so their sign is kept."""

    def __init__(
        self, num_envs: int, gamma: float, epsilon: float = 1e-8, clip: float = 10.0, device: str | torch.device = "cpu"
    ) -> None:
        self.gamma = gamma
        self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.stats = RunningMeanStd((), epsilon, clip, device)

    def __call__(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        reward = torch.as_tensor(reward, device=self.returns.device)
        self.returns = self.returns * self.gamma + reward.to(torch.float64)
        self.stats.update(self.returns)
        self.returns = self.returns * (1.0 - torch.as_tensor(done, device=self.returns.device).to(torch.float64))
        std = (self.stats.var + self.stats.epsilon).sqrt().to(torch.float32)
        return (reward.to(torch.float32) / std).clamp_(-self.stats.clip, self.stats.clip)

    def state_dict(self) -> dict[str, Any]:
        return {"returns": self.returns.clone(), "stats": self.stats.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns = state["returns"].to(self.returns.device, torch.float64).clone()
        self.stats.load_state_dict(state["stats"])
