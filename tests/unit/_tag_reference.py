"""Tag-v0 test helpers: building hand-made states and actions, and a per-agent reference of
the rules of ``msrl.envs.tag`` (one agent and one pair at a time, in plain Python), which the
vectorised backends are checked against (``test_env_tag.py``, ``test_env_tag_reference.py``)."""

from __future__ import annotations

import math

import numpy as np
import torch

import msrl.envs
from msrl.envs.tag import Tag

TWO_PI = 2 * math.pi
NOOP = 7  # acceleration level 1 of 3 (0.0) and turn level 2 of 5 (0.0) with the default constants
BACKENDS = {
    "numpy": {"backend": "numpy"},
    "torch-f64": {"backend": "torch", "dtype": torch.float64},
    "torch-f32": {"backend": "torch", "dtype": torch.float32},
}


def np_(x):
    if isinstance(x, dict):
        return {k: np_(v) for k, v in x.items()}
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def make(num_envs: int = 1, backend: str = "numpy", seed: int = 0, **kwargs) -> Tag:
    return msrl.envs.make("Tag-v0", num_envs=num_envs, seed=seed, **BACKENDS[backend], **kwargs)


def close(backend: str) -> dict:
    """Exact on NumPy and float64 torch (up to a 1-ulp cos/sin), float32 rounding otherwise."""
    return {"rtol": 2e-6, "atol": 2e-6} if backend == "torch-f32" else {"rtol": 1e-12, "atol": 1e-12}


def state(x, y, speed=None, heading=None, active=None, t=0.0) -> np.ndarray:
    """One environment's state row from per-agent lists."""
    n = len(x)
    speed = [0.0] * n if speed is None else speed
    heading = [0.0] * n if heading is None else heading
    active = [1.0] * n if active is None else active
    return np.array([[*x, *y, *speed, *heading, *active, t]], dtype=np.float64)


def actions(env: Tag, agents: list[int]) -> dict:
    T = env.num_taggers
    return {"taggers": np.array([agents[:T]]), "runners": np.array([agents[T:]])}


def step(env: Tag, agents: list[int]):
    obs, rewards, terminated, truncated = env.step(actions(env, agents))
    reward = np.concatenate([np_(rewards["taggers"]), np_(rewards["runners"])], 1)[0]
    return np_(obs), reward, float(np_(terminated)[0]), float(np_(truncated)[0])


def split(env: Tag, row: np.ndarray) -> list[np.ndarray]:
    N = env.num_agents
    return [row[k * N : (k + 1) * N] for k in range(5)] + [row[5 * N]]


# -- a per-agent reference of the rules, written from the module docstring ----------------


def levels(n: int, low: float, high: float) -> list[float]:
    return [low + (k * (high - low)) / (n - 1) for k in range(n)] if n > 1 else [low]


def reference_step(env: Tag, row: np.ndarray, acts: list[int]) -> tuple[np.ndarray, list[float], bool]:
    T, N, W = env.num_taggers, env.num_agents, env.world_size
    x, y, speed, heading, active, t = (list(v) if k < 5 else v for k, v in enumerate(split(env, row)))
    acc_levels = levels(env.num_acceleration_levels, env.min_acceleration, env.max_acceleration)
    turn_levels = levels(env.num_turn_levels, env.min_turn, env.max_turn)
    was_active = [a > 0 for a in active]
    reward = [0.0] * N
    for i in range(N):
        if not was_active[i]:
            continue
        a = acts[i]
        h = heading[i] + turn_levels[a % env.num_turn_levels]
        heading[i] = h - TWO_PI * np.floor(h / TWO_PI)
        top = env.tagger_max_speed if i < T else env.runner_max_speed
        speed[i] = min(max(speed[i] + acc_levels[a // env.num_turn_levels], 0.0), top)
        nx = x[i] + speed[i] * np.cos(np.float64(heading[i]))
        ny = y[i] + speed[i] * np.sin(np.float64(heading[i]))
        x[i], y[i] = min(max(nx, 0.0), W), min(max(ny, 0.0), W)
        reward[i] = env.edge_hit_penalty if (x[i] != nx or y[i] != ny) else 0.0
        reward[i] += env.step_penalty_for_tagger if i < T else env.step_reward_for_runner
    count = [0] * T
    for r in range(T, N):
        if not was_active[r]:
            continue
        near = [
            k for k in range(T) if was_active[k] and (x[r] - x[k]) ** 2 + (y[r] - y[k]) ** 2 <= env.tagging_distance**2
        ]
        for k in near:
            count[k] += 1
        if near:
            reward[r] += env.tag_penalty_for_runner
            if env.runner_exits_game_after_tagged:
                active[r] = 0.0
    for k in range(T):
        reward[k] += count[k] * env.tag_reward_for_tagger
    t += 1
    for r in range(T, N):
        if active[r] > 0 and t == env.max_episode_steps:
            reward[r] += env.end_of_game_reward_for_runner
    new = np.array([*x, *y, *speed, *heading, *active, t])
    return new, reward, not any(active[r] > 0 for r in range(T, N))


def reference_obs(env: Tag, row: np.ndarray) -> np.ndarray:
    """``(N, 7 + 5 M)`` float32 observations of one environment."""
    T, N, W, M = env.num_taggers, env.num_agents, env.world_size, env.observed
    x, y, speed, heading, active, t = split(env, row)
    top = [env.tagger_max_speed if i < T else env.runner_max_speed for i in range(N)]
    out = []
    for i in range(N):
        feats = [
            x[i] / W,
            y[i] / W,
            speed[i] / top[i],
            np.cos(heading[i]),
            np.sin(heading[i]),
            active[i],
            t / env.max_episode_steps,
        ]
        others = [j for j in range(N) if j != i]
        if M < N - 1:
            keys = {j: ((x[j] - x[i]) ** 2 + (y[j] - y[i]) ** 2 if active[j] > 0 else math.inf, j) for j in others}
            others = sorted(others, key=keys.__getitem__)[:M]
        for j in others:
            feats += [(x[j] - x[i]) / W, (y[j] - y[i]) / W, speed[j] / top[j], float(j < T), active[j]]
        out.append(feats)
    return np.array(out, dtype=np.float32)


def random_states(env: Tag, rng: np.random.Generator, grid: float = 0.5) -> np.ndarray:
    """Positions on a grid (so distances tie), some runners inactive, some agents on the edges."""
    n, N, T, W = env.num_envs, env.num_agents, env.num_taggers, env.world_size
    out = np.zeros((n, 5 * N + 1))
    out[:, : 2 * N] = np.round(rng.uniform(0, W, (n, 2 * N)) / grid) * grid
    out[:, 2 * N : 3 * N] = rng.uniform(0, 1.0, (n, N))
    out[:, 3 * N : 4 * N] = rng.uniform(0, TWO_PI, (n, N))
    out[:, 4 * N : 5 * N] = 1.0
    out[:, 4 * N + T : 5 * N] = rng.random((n, N - T)) < 0.7
    out[:, 5 * N] = rng.integers(0, env.max_episode_steps, n)  # the last step's bonus included
    return out


def obs_rows(obs: dict, e: int) -> np.ndarray:
    return np.concatenate([np_(obs["taggers"])[e], np_(obs["runners"])[e]])


# -- spaces, registry, constants -------------------------------------------------------
