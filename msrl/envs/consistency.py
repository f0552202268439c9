"""Check that two backends of one environment agree step for step.

``check_consistency(env_a, env_b, steps)`` puts ``env_a``'s physical state into
``env_b``, steps both with the same actions and compares observations,
rewards and the terminated/truncated flags after every step.  ``env_a`` is the
reference (usually the NumPy backend).

Why re-synchronise:

* After an episode ends each backend draws its next start state from its own
  generator, so the done environments are re-synced from ``env_a`` (as new
  episodes) before the next step.
* CartPole and Pendulum are chaotic: a 1e-7 difference (one float32 rounding)
  grows by orders of magnitude over a 200-step episode, so long-horizon
  comparisons would measure the physics, not the backend.  Every
  ``resync_every`` steps the whole state of ``env_b`` is re-aligned to
  ``env_a`` without restarting episodes; errors are then bounded by what a
  backend accumulates over ``resync_every`` steps.

Defaults (``atol``/``rtol``/``max_flag_mismatch_fraction``/``resync_every`` =
None pick them from the precision of the two states):

* both float64: ``atol=1e-9, rtol=1e-6``, no flag mismatch allowed,
  ``resync_every=10`` (so state carried across steps inside ``env_b`` is
  exercised; float64 rounding differences stay far below tolerance).  The
  outputs are float32, so this means identical except for a flip of the last
  float32 bit, which a 1-ulp difference of sin/cos between libm, SLEEF (torch
  CPU) and CUDA causes with probability ~1e-8 per value.  NumPy vs torch
  float64 on CPU is in practice bit-identical.
* any float32 state: ``atol=1e-4, rtol=1e-4``, up to 1e-3 of env-steps with
  mismatching flags (a pole within float32 rounding of the 12 degree or 2.4 m
  threshold may terminate in one backend and not the other) and
  ``resync_every=5``.  Measured against NumPy (600 steps x 64 envs, random
  actions): max obs error 5e-7 (CartPole) and 8e-6 (Pendulum, whose float32
  angle is not wrapped and loses absolute precision as it spins), reward
  error 4e-5 on rewards of magnitude up to ~16.  Five steps let a real bug
  accumulate above the tolerance: gravity off by 0.1% gives ~3e-4 in
  CartPole, while one-step comparisons (``resync_every=1``, ~7e-5) miss it.

Protocol the backends must follow (``msrl.envs.BatchedEnv`` provides it on
every array backend, kernels included; anything else must too): ``num_envs``,
``action_space``, ``observe()``,
``step(action)`` accepting NumPy actions, ``get_state()`` returning an array or
tensor of shape ``(num_envs, state_dim)`` (any device; converted with
``.cpu().numpy()``) and ``set_state(state, mask=None, *, new_episode=True)``
accepting a NumPy float64 array and a NumPy bool mask.

Multi-agent environments (``msrl.envs.MultiAgentEnv``) are compared the same
way: their observations, rewards and actions are dicts keyed by group, random
actions are drawn per group from ``action_space[group]`` with shape
``(num_envs, groups[group].num_agents)``, and every group's values count
towards the ``obs`` and ``reward`` fields (the flags are per environment).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from msrl.core import Box, Discrete

_FIELDS = ("obs", "reward", "terminated", "truncated")


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray) and hasattr(value, "get") and hasattr(value, "shape"):
        return np.asarray(value.get())  # pycuda / cupy arrays
    return np.asarray(value)


@dataclass
class ConsistencyReport:
    """Outcome of ``check_consistency``.

    ``max_abs_error`` has one entry per field (``obs``, ``reward``,
    ``terminated``, ``truncated``); observations are only compared where
    neither backend ended an episode (the reset observations differ by design)
    and rewards where the flags agree.  Step 0 is the observation right after
    the initial sync; steps 1..``steps`` are ``step`` calls.
    """

    ok: bool
    steps: int
    num_envs: int
    max_abs_error: dict[str, float]
    first_mismatch_step: int | None
    first_mismatch_field: str | None
    flag_mismatches: int
    flag_mismatch_fraction: float
    atol: float
    rtol: float
    max_flag_mismatch_fraction: float
    resync_every: int
    tolerance_violations: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        errs = ", ".join(f"{k}={v:.3g}" for k, v in self.max_abs_error.items())
        where = (
            "no mismatch"
            if self.first_mismatch_step is None
            else f"first mismatch at step {self.first_mismatch_step} ({self.first_mismatch_field})"
        )
        return (
            f"{'consistent' if self.ok else 'INCONSISTENT'} over {self.steps} steps x {self.num_envs} envs: "
            f"max abs error {errs}; flag mismatches {self.flag_mismatches} "
            f"({self.flag_mismatch_fraction:.2g} <= {self.max_flag_mismatch_fraction:.2g} allowed); {where}"
        )


def _is_float64(env: Any) -> bool:
    return _to_numpy(env.get_state()).dtype.itemsize >= 8


def _host(value: Any, dtype: Any = None) -> Any:
    """``value`` (an array, a tensor, or a dict of them per agent group) as NumPy, cast to ``dtype`` if given."""
    if isinstance(value, dict):
        return {name: _host(v, dtype) for name, v in value.items()}
    array = _to_numpy(value)
    return array if dtype is None else array.astype(dtype)


def _copy(action: Any) -> Any:
    return {name: a.copy() for name, a in action.items()} if isinstance(action, dict) else action.copy()


def _random_actions(space: Any, num_envs: int, rng: np.random.Generator, groups: Any = None) -> Any:
    """A batch of uniform random valid actions; for a multi-agent environment a dict of them per group
    (``space`` the dict of per-agent action spaces, ``groups`` the ``AgentGroup``s with their sizes)."""
    if isinstance(space, dict):
        return {name: _sample(s, (num_envs, groups[name].num_agents), rng) for name, s in space.items()}
    return _sample(space, (num_envs,), rng)


def _sample(space: Any, batch: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, Discrete):
        return rng.integers(0, space.n, size=batch)
    if isinstance(space, Box):
        shape = (*batch, *space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float64), space.shape)
        high = np.broadcast_to(np.asarray(space.high, np.float64), space.shape)
        low = np.where(np.isfinite(low), low, -1.0)
        high = np.where(np.isfinite(high), high, 1.0)
        return rng.uniform(low, high, size=shape).astype(space.dtype)
    raise TypeError(f"cannot sample random actions from {space!r}; pass actions=")


def check_consistency(
    env_a: Any,
    env_b: Any,
    steps: int,
    actions: Sequence[Any] | np.ndarray | Callable[[int, np.ndarray], Any] | None = None,
    seed: int = 0,
    atol: float | None = None,
    rtol: float | None = None,
    max_flag_mismatch_fraction: float | None = None,
    resync_every: int | None = None,
) -> ConsistencyReport:
    """Step ``env_a`` (reference) and ``env_b`` in lockstep and compare them.

    ``actions``: None (uniform random valid actions from a NumPy generator
    seeded with ``seed``), a sequence indexed by step (``actions[t]`` for the
    t-th call, 0-based), or ``actions(t, obs_a) -> action`` for closed-loop
    policies.  ``resync_every=0`` re-syncs only after episodes end (useful
    for float64 pairs and short horizons).  See the module docstring for the
    default tolerances.
    """
    if env_a.num_envs != env_b.num_envs:
        raise ValueError(f"both environments need the same num_envs, got {env_a.num_envs} and {env_b.num_envs}")
    n = env_a.num_envs
    precise = _is_float64(env_a) and _is_float64(env_b)
    atol = (1e-9 if precise else 1e-4) if atol is None else atol
    rtol = (1e-6 if precise else 1e-4) if rtol is None else rtol
    if max_flag_mismatch_fraction is None:
        max_flag_mismatch_fraction = 0.0 if precise else 1e-3
    if resync_every is None:
        resync_every = 10 if precise else 5
    rng = np.random.default_rng(seed)

    max_err = dict.fromkeys(_FIELDS, 0.0)
    violations = dict.fromkeys(_FIELDS, 0)
    first: list[Any] = [None, None]

    def compare(name: str, a: Any, b: Any, where: np.ndarray | None, step: int) -> None:
        if isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b):
            for group in a:  # ``where`` selects environments, the first axis of every group's values
                compare(name, a[group], b[group], where, step)
            return
        if isinstance(a, dict) or isinstance(b, dict) or a.shape != b.shape:
            max_err[name], bad = float("inf"), 1
        else:
            if where is not None:
                a, b = a[where], b[where]
            if a.size == 0:
                return
            err = np.abs(a - b)
            err = np.where(np.isnan(a) & np.isnan(b), 0.0, err)  # NaN in both: agree
            err = np.where(np.isnan(err), np.inf, err)
            max_err[name] = max(max_err[name], float(err.max()))
            bad = int(np.count_nonzero(err > atol + rtol * np.abs(a)))
        if bad:
            violations[name] += bad
            if first[0] is None:
                first[:] = [step, name]

    state = _to_numpy(env_a.get_state())
    env_a.set_state(state)
    env_b.set_state(state)
    obs_a = _host(env_a.observe())
    compare("obs", _host(obs_a, np.float64), _host(env_b.observe(), np.float64), None, 0)

    flag_mismatches = 0
    for t in range(steps):
        if actions is None:
            act = _random_actions(env_a.action_space, n, rng, getattr(env_a, "groups", None))
        elif callable(actions):
            act = _host(actions(t, obs_a))
        else:
            act = _host(actions[t])
        out_a = [_host(v, np.float64) for v in env_a.step(_copy(act))]
        out_b = [_host(v, np.float64) for v in env_b.step(_copy(act))]
        obs_a = _host(out_a[0], np.float32)

        term_a, trunc_a, term_b, trunc_b = out_a[2] > 0, out_a[3] > 0, out_b[2] > 0, out_b[3] > 0
        flag_bad = (term_a != term_b) | (trunc_a != trunc_b)
        done_a, done_b = term_a | trunc_a, term_b | trunc_b
        for name, k in (("terminated", 2), ("truncated", 3)):
            max_err[name] = max(max_err[name], float(np.abs(out_a[k] - out_b[k]).max()))
        if flag_bad.any():
            flag_mismatches += int(np.count_nonzero(flag_bad))
            if first[0] is None:
                first[:] = [t + 1, "terminated" if (term_a != term_b).any() else "truncated"]
        compare("reward", out_a[1], out_b[1], ~flag_bad, t + 1)
        compare("obs", out_a[0], out_b[0], ~(done_a | done_b), t + 1)

        ended = done_a | done_b
        if ended.any():
            state = _to_numpy(env_a.get_state())
            only_b = done_b & ~done_a
            if only_b.any():
                env_a.set_state(state, only_b)  # restart a's episode too, so the time limits stay aligned
            env_b.set_state(state, ended)
        if resync_every and (t + 1) % resync_every == 0:
            env_b.set_state(_to_numpy(env_a.get_state()), new_episode=False)

    fraction = flag_mismatches / max(1, steps * n)
    ok = not any(violations.values()) and fraction <= max_flag_mismatch_fraction
    return ConsistencyReport(
        ok=ok,
        steps=steps,
        num_envs=n,
        max_abs_error=max_err,
        first_mismatch_step=first[0],
        first_mismatch_field=first[1],
        flag_mismatches=flag_mismatches,
        flag_mismatch_fraction=fraction,
        atol=atol,
        rtol=rtol,
        max_flag_mismatch_fraction=max_flag_mismatch_fraction,
        resync_every=resync_every,
        tolerance_violations=violations,
    )
