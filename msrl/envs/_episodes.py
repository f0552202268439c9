"""Episode bookkeeping shared by the built-in environment backends.

Every backend needs the same things around its physics: per-environment
running return and length (the length doubles as the elapsed-step counter of
the time limit), same-step autoreset, seeding, ``set_state`` for consistency
checks and checkpoints that resume bit-exactly.  Keeping them here means each
environment module holds only its dynamics, and the NumPy and torch backends
cannot drift apart in how they count episodes.

Checkpoint contents are torch tensors and plain Python values only (never NumPy
arrays), so ``torch.load(weights_only=True)`` can read them; the tracker's
state dict has the same layout on both backends, so a checkpoint can even move
between them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from msrl._components import Environment
from msrl._errors import CheckpointError, ConfigError, EnvError

_TRACKER_KEYS = ("running_return", "running_length", "finished_return", "finished_length", "finished_count")


def _summary(total_return: float, total_length: float, count: int) -> dict[str, float]:
    if count == 0:
        return {}
    return {"episode_return": total_return / count, "episode_length": total_length / count, "episodes": count}


def _check_tracker_state(state: dict[str, Any], num_envs: int) -> None:
    missing = [k for k in _TRACKER_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"episode tracker state lacks {missing}; expected keys {list(_TRACKER_KEYS)}")
    for key in ("running_return", "running_length"):
        if tuple(state[key].shape) != (num_envs,):
            raise CheckpointError(
                f"episode tracker {key} has shape {tuple(state[key].shape)}, expected ({num_envs},) for {num_envs} envs"
            )


class EpisodeTracker:
    """Running return/length per environment on the host (NumPy backends).

    ``add`` is called once per step with the step's reward and returns the
    running lengths (so the caller can apply its time limit); ``finish`` records
    the episodes that just ended and zeroes their running values.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        self._finished_return = 0.0
        self._finished_length = 0
        self._finished_count = 0

    def add(self, reward: np.ndarray) -> np.ndarray:
        self.returns += reward
        self.lengths += 1
        return self.lengths

    def finish(self, done: np.ndarray) -> None:
        """Record the episodes of the ``done`` (bool) environments; the caller
        skips this when nothing is done, which keeps the common step cheap."""
        self._finished_return += float(self.returns[done].sum())
        self._finished_length += int(self.lengths[done].sum())
        self._finished_count += int(np.count_nonzero(done))
        self.returns[done] = 0.0
        self.lengths[done] = 0

    def discard(self, mask: np.ndarray | None = None) -> None:
        """Forget the running episodes (all, or where ``mask``) without recording
        them: used by ``reset`` and ``set_state``, which start new episodes."""
        if mask is None:
            self.returns[:] = 0.0
            self.lengths[:] = 0
        else:
            self.returns[mask] = 0.0
            self.lengths[mask] = 0

    def adopt_running(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Add to the running episodes what happened outside ``add`` (a rollout
        kernel that kept its own counters)."""
        self.returns += returns
        self.lengths += lengths

    def metrics(self) -> dict[str, float]:
        out = _summary(self._finished_return, self._finished_length, self._finished_count)
        self._finished_return, self._finished_length, self._finished_count = 0.0, 0, 0
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "running_return": torch.from_numpy(self.returns.copy()),
            "running_length": torch.from_numpy(self.lengths.copy()),
            "finished_return": self._finished_return,
            "finished_length": self._finished_length,
            "finished_count": self._finished_count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_tracker_state(state, self.num_envs)
        self.returns = torch.as_tensor(state["running_return"]).to(torch.float64).numpy().copy()
        self.lengths = torch.as_tensor(state["running_length"]).to(torch.int64).numpy().copy()
        self._finished_return = float(state["finished_return"])
        self._finished_length = int(state["finished_length"])
        self._finished_count = int(state["finished_count"])


class TorchEpisodeTracker:
    """The same bookkeeping on a torch device, without host syncs per step.

    Finished-episode totals are kept lazily.  Since the last ``metrics`` every
    environment's rewards went either to episodes that ended or to the episode
    still running, so the ended episodes' returns add up to

        (rewards since then) + (running returns then) - (running returns now)

    and likewise for lengths, where "rewards" is one per env per step.  A step
    therefore costs one sum of the reward and the zeroing of the finished
    environments (``finish`` with a mask or ``finish_at`` with indices), and no
    gather of their returns.  The totals stay on the device; only ``metrics``
    and ``state_dict`` copy to the host.  Whatever changes the running values
    other than ``add``/``finish`` (``discard``, ``adopt_running``) moves the
    baseline with it, so no episode is counted twice or lost.
    """

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.num_envs = num_envs
        self.device = device
        self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.lengths = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self._start_new_window(torch.zeros((), dtype=torch.float64, device=device),
                               torch.zeros((), dtype=torch.int64, device=device),
                               torch.zeros((), dtype=torch.int64, device=device))

    def _start_new_window(self, finished_return: torch.Tensor, finished_length: torch.Tensor,
                          finished_count: torch.Tensor) -> None:
        """Start counting from now, with these totals already finished."""
        self._return_base = finished_return + self.returns.sum()  # rewards since + running then
        self._length_base = finished_length + self.lengths.sum()
        self._steps = 0  # env steps per environment since the window started (host int: no device op)
        self._count = finished_count
        self._count_host = 0

    def add(self, reward: torch.Tensor) -> torch.Tensor:
        self.returns += reward
        self.lengths += 1
        self._return_base += reward.sum(dtype=torch.float64)
        self._steps += 1
        return self.lengths

    def finish_at(self, idx: torch.Tensor) -> None:
        """``finish`` for the environments at ``idx`` (int64 indices): on the CPU,
        where the indices cost nothing to find, this touches only those rows."""
        self._count_host += idx.numel()
        self.returns.index_fill_(0, idx, 0.0)
        self.lengths.index_fill_(0, idx, 0)

    def finish(self, done: torch.Tensor) -> None:
        self._count += done.sum()
        self.returns.masked_fill_(done, 0.0)
        self.lengths.masked_fill_(done, 0)

    def discard(self, mask: torch.Tensor | None = None) -> None:
        """Forget the running episodes (all, or where ``mask``) without recording them."""
        if mask is None:
            self._return_base -= self.returns.sum()
            self._length_base -= self.lengths.sum()
            self.returns.zero_()
            self.lengths.zero_()
        else:
            self._return_base -= torch.where(mask, self.returns, 0.0).sum()
            self._length_base -= torch.where(mask, self.lengths, 0).sum()
            self.returns.masked_fill_(mask, 0.0)
            self.lengths.masked_fill_(mask, 0)

    def adopt_running(self, returns: torch.Tensor, lengths: torch.Tensor) -> None:
        """Add to the running episodes what happened outside ``add`` (a rollout
        kernel that kept its own counters), so it is not counted as finished."""
        self.returns += returns
        self.lengths += lengths
        self._return_base += returns.sum()
        self._length_base += lengths.sum()

    def _totals(self) -> torch.Tensor:
        """(finished return, length, count) as one float64 tensor on the device."""
        finished_return = self._return_base - self.returns.sum()
        finished_length = self._length_base + self._steps * self.num_envs - self.lengths.sum()
        count = self._count + self._count_host
        return torch.stack([finished_return, finished_length.double(), count.double()])

    def metrics(self) -> dict[str, float]:
        total_return, total_length, count = self._totals().tolist()  # the one host copy
        self._start_new_window(torch.zeros_like(self._return_base), torch.zeros_like(self._length_base),
                               torch.zeros_like(self._count))
        return _summary(total_return, total_length, int(count))

    def state_dict(self) -> dict[str, Any]:
        total_return, total_length, count = self._totals().tolist()
        return {
            "running_return": self.returns.detach().cpu().clone(),
            "running_length": self.lengths.detach().cpu().clone(),
            "finished_return": float(total_return),
            "finished_length": int(total_length),
            "finished_count": int(count),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_tracker_state(state, self.num_envs)
        dev = self.device
        self.returns = torch.as_tensor(state["running_return"]).to(dev, torch.float64).clone()
        self.lengths = torch.as_tensor(state["running_length"]).to(dev, torch.int64).clone()
        self._start_new_window(torch.tensor(float(state["finished_return"]), dtype=torch.float64, device=dev),
                               torch.tensor(int(state["finished_length"]), dtype=torch.int64, device=dev),
                               torch.tensor(int(state["finished_count"]), dtype=torch.int64, device=dev))


def _check_num_envs(num_envs: Any) -> int:
    if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    return int(num_envs)


def _check_state_keys(env: Any, state: dict[str, Any], keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(f"{type(env).__name__} checkpoint lacks {missing}; expected keys {list(keys)}")
    shape = tuple(state["state"].shape)
    if shape != (env.num_envs, env.state_dim):
        raise CheckpointError(
            f"{type(env).__name__} checkpoint holds state of shape {shape}, expected ({env.num_envs}, {env.state_dim})"
        )


class NumpyBatchedEnv(Environment):
    """Autoreset, time limit, seeding and checkpoints of the NumPy backends.

    Subclasses set ``env_id``, ``state_dim``, ``max_episode_steps`` and implement
    ``_draw_reset(n)`` (``n`` fresh float64 states from ``self._rng``),
    ``_obs(state)`` (float32 observations) and ``step``, which ends with
    ``return self._end_step(new_state, reward, terminated)``.

    All randomness comes from one ``np.random.Generator`` so that a checkpoint
    (its ``bit_generator.state``) resumes the exact same reset draws.
    """

    env_id: str
    state_dim: int
    max_episode_steps: int

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.num_envs = _check_num_envs(num_envs)
        self._rng = np.random.default_rng(seed)
        self._tracker = EpisodeTracker(self.num_envs)
        self._state = self._draw_reset(self.num_envs)

    # -- subclass hooks --------------------------------------------------
    def _draw_reset(self, n: int) -> np.ndarray:
        raise NotImplementedError

    def _obs(self, state: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # -- Environment API -------------------------------------------------
    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start a new episode everywhere; ``seed`` re-seeds the generator, so
        ``reset(seed=s)`` gives the same first states as constructing with ``s``."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._state = self._draw_reset(self.num_envs)
        self._tracker.discard()
        return self._obs(self._state)

    def observe(self) -> np.ndarray:
        return self._obs(self._state)

    def _end_step(
        self, new_state: np.ndarray, reward: np.ndarray, terminated: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Time limit, episode accounting and same-step autoreset."""
        lengths = self._tracker.add(reward)
        truncated = lengths >= self.max_episode_steps
        done = terminated | truncated
        if done.any():
            self._tracker.finish(done)
            idx = np.flatnonzero(done)
            new_state[idx] = self._draw_reset(idx.size)
        self._state = new_state
        return self._obs(new_state), reward, terminated.astype(np.float32), truncated.astype(np.float32)

    # -- direct state access (tests, consistency checks) ----------------
    def get_state(self) -> np.ndarray:
        """A copy of the physical state, ``(num_envs, state_dim)`` float64."""
        return self._state.copy()

    def set_state(self, state: Any, mask: Any = None, *, new_episode: bool = True) -> None:
        """Overwrite the physical state (all envs, or the rows where ``mask``).

        By default this starts new episodes there (elapsed steps and running
        return are zeroed); ``new_episode=False`` keeps them, which lets a
        consistency check re-align two backends mid-episode without moving
        their time limits.  Accepts NumPy arrays and torch tensors on any device.
        """
        if isinstance(state, torch.Tensor):
            state = state.detach().cpu().numpy()
        state = np.array(state, dtype=np.float64)
        if state.shape != (self.num_envs, self.state_dim):
            raise EnvError(
                f"{self.env_id} state must have shape ({self.num_envs}, {self.state_dim}), got {state.shape}"
            )
        if mask is None:
            self._state = state
        else:
            if isinstance(mask, torch.Tensor):
                mask = mask.detach().cpu().numpy()
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (self.num_envs,):
                raise EnvError(f"{self.env_id} state mask must have shape ({self.num_envs},), got {mask.shape}")
            self._state[mask] = state[mask]
        if new_episode:
            self._tracker.discard(mask)

    # -- Component API ---------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self._tracker.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {
            "state": torch.from_numpy(self._state.copy()),
            "rng": self._rng.bit_generator.state,  # nested dict of str/int
            "episodes": self._tracker.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_state_keys(self, state, ("state", "rng", "episodes"))
        self._tracker.load_state_dict(state["episodes"])
        self._state = torch.as_tensor(state["state"]).to(torch.float64).numpy().copy()
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = state["rng"]
        except (TypeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{type(self).__name__} checkpoint has an unusable generator state: {exc}") from None
        self._rng = rng


_FLOAT_DTYPES = (torch.float32, torch.float64)


def _columns_contiguous(state: torch.Tensor) -> torch.Tensor:
    """A fresh ``(num_envs, state_dim)`` copy of ``state``, stored column by column.

    A step works on one state variable at a time (``theta = state[:, 2]``); with
    each column contiguous those are plain vectors, which torch's CPU kernels
    vectorise: at 4,096 envs ``cos`` of a column takes 8.6 us instead of 13.7 us
    strided, a multiplication 2 us instead of 5.  Elementwise results keep the
    layout of their inputs, so a step that starts from this layout keeps it.
    """
    return state.t().clone(memory_format=torch.contiguous_format).t()


class TorchBatchedEnv(Environment):
    """Autoreset, time limit, seeding and checkpoints of the torch backends.

    On an accelerator nothing in ``step`` copies to the host: done
    environments are reset with ``torch.where`` from fresh states drawn for
    *every* environment each step (drawing only where needed would need the
    count, i.e. a sync).  On the CPU that "sync" is free while drawing and
    blending a full batch of states is most of a step's cost, so there the
    backend draws states only for the environments that finished, as the NumPy
    backend does.  Either way the draws depend only on the seed and the
    episodes, so runs are reproducible.

    ``step`` runs under ``torch.inference_mode``, which takes about a
    microsecond of dispatch off every op (a sixth of a CPU step at 4,096
    envs).  What it returns is allocated outside, so observations, rewards and
    flags are ordinary tensors that autograd may save; only the internal state
    becomes an inference tensor, which nothing outside ``step`` updates in
    place.

    Subclasses set ``env_id``, ``state_dim``, ``obs_dim``, ``max_episode_steps``
    and implement ``_check_action``, ``_draw_reset(n)`` (``n`` fresh states from
    ``self._gen``), ``_write_obs(state, out)`` and ``_advance(action, reward,
    terminated)``, which writes the step's reward and 0/1 termination flags into
    the two float32 tensors it is given and returns the new state.
    """

    env_id: str
    state_dim: int
    obs_dim: int
    max_episode_steps: int

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        validate: bool = False,
    ) -> None:
        self.num_envs = _check_num_envs(num_envs)
        if dtype not in _FLOAT_DTYPES:
            raise ConfigError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        self.device = torch.device(device)
        self.dtype = dtype
        self.validate = bool(validate)
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(int(seed))
        self._sparse_reset = self.device.type == "cpu"
        self._time_limit = torch.tensor(self.max_episode_steps, device=self.device)
        self._tracker = TorchEpisodeTracker(self.num_envs, self.device)
        self._state = _columns_contiguous(self._draw_reset(self.num_envs))

    def _draw_reset(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def _check_action(self, action: Any) -> torch.Tensor:
        raise NotImplementedError

    def _advance(self, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _write_obs(self, state: torch.Tensor, out: torch.Tensor) -> None:
        raise NotImplementedError

    def _obs_buffer(self) -> torch.Tensor:
        """Room for float32 observations, laid out column by column like the state,
        so filling it is a plain copy (a transposing copy costs 30 us at 4,096 envs)."""
        return torch.empty_strided((self.num_envs, self.obs_dim), (1, self.num_envs), dtype=torch.float32,
                                   device=self.device)

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        out = self._obs_buffer()
        self._write_obs(state, out)
        return out

    def step(self, action: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance every environment one step; returns float32 ``(obs, reward,
        terminated, truncated)``, with same-step autoreset of the finished ones."""
        a = self._check_action(action)
        reward, terminated, truncated = (torch.empty(self.num_envs, dtype=torch.float32, device=self.device)
                                         for _ in range(3))
        obs = self._obs_buffer()
        with torch.inference_mode():
            new_state = self._advance(a, reward, terminated)
            self._end_step(new_state, reward, terminated, truncated)
            self._write_obs(self._state, obs)
        return obs, reward, terminated, truncated

    def _as_tensor(self, value: Any) -> torch.Tensor:
        """Actions/states may come as NumPy arrays or tensors on another device."""
        if isinstance(value, torch.Tensor):
            return value if value.device == self.device else value.to(self.device)
        return torch.as_tensor(np.asarray(value), device=self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self._gen.manual_seed(int(seed))
        self._state = _columns_contiguous(self._draw_reset(self.num_envs))
        self._tracker.discard()
        return self._obs(self._state)

    def observe(self) -> torch.Tensor:
        return self._obs(self._state)

    def _end_step(self, new_state: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
                  truncated: torch.Tensor) -> None:
        """Time limit (written into ``truncated``), episode accounting and
        same-step autoreset.  The flags are float32 0/1 throughout, because that
        is what ``step`` returns and a bool-to-float conversion costs as much as
        a comparison."""
        lengths = self._tracker.add(reward)
        torch.ge(lengths, self._time_limit, out=truncated)
        done = terminated + truncated  # 0, 1 or 2
        if self._sparse_reset:
            idx = done.nonzero().view(-1)
            if idx.numel():
                self._tracker.finish_at(idx)
                new_state.index_copy_(0, idx, self._draw_reset(idx.numel()))
            self._state = new_state
        else:
            finished = done.bool()
            self._tracker.finish(finished)
            # written into new_state, which keeps its column layout
            self._state = torch.where(finished.unsqueeze(1), self._draw_reset(self.num_envs), new_state, out=new_state)

    def get_state(self) -> torch.Tensor:
        """A copy of the physical state, ``(num_envs, state_dim)`` in ``dtype`` on ``device``."""
        return self._state.clone()

    def set_state(self, state: Any, mask: Any = None, *, new_episode: bool = True) -> None:
        """As ``NumpyBatchedEnv.set_state``; accepts NumPy arrays or tensors."""
        state = self._as_tensor(state).to(self.dtype)
        if tuple(state.shape) != (self.num_envs, self.state_dim):
            raise EnvError(
                f"{self.env_id} state must have shape ({self.num_envs}, {self.state_dim}), got {tuple(state.shape)}"
            )
        if mask is None:
            self._state = _columns_contiguous(state)
        else:
            mask = self._as_tensor(mask).to(torch.bool)
            if tuple(mask.shape) != (self.num_envs,):
                raise EnvError(f"{self.env_id} state mask must have shape ({self.num_envs},), got {tuple(mask.shape)}")
            self._state = _columns_contiguous(torch.where(mask.unsqueeze(1), state, self._state))
        if new_episode:
            self._tracker.discard(mask)

    def metrics(self) -> dict[str, float]:
        return self._tracker.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {
            "state": self._state.detach().cpu().clone(),
            "rng": self._gen.get_state().clone(),  # a CPU uint8 tensor, also for CUDA generators
            "episodes": self._tracker.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_state_keys(self, state, ("state", "rng", "episodes"))
        try:
            self._gen.set_state(torch.as_tensor(state["rng"]).cpu())
        except (TypeError, RuntimeError) as exc:
            raise CheckpointError(f"{type(self).__name__} checkpoint has an unusable generator state: {exc}") from None
        self._tracker.load_state_dict(state["episodes"])
        self._state = _columns_contiguous(torch.as_tensor(state["state"]).to(self.device, self.dtype))
