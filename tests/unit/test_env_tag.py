"""Tag-v0 on NumPy and torch: each rule of ``msrl.envs.tag`` on hand-built states, a
per-agent reference of the rules against the vectorised step and observations (the
nearest-others selection included, ties and inactive agents too, on both its
code paths), the backends step for step, resets, checkpoints, chunking and its
memory bound, and the constructor's checks."""

from __future__ import annotations

import io
import math
import tracemalloc

import numpy as np
import pytest
import torch

import msrl
import msrl.envs
from msrl import ConfigError, EnvError
from msrl.envs.consistency import check_consistency
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


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    return request.param


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


def test_spaces_registry_and_kernel_defines():
    env = make(3)
    assert isinstance(env, Tag) and env.arrays.name == "numpy" and env.kernel == "tag"
    assert set(env.groups) == {"taggers", "runners"} and env.num_agents == 10
    assert env.groups["taggers"].num_agents == 2 and env.groups["runners"].num_agents == 8
    assert env.groups["runners"].observation_space.shape == (7 + 5 * 9,)
    assert env.groups["taggers"].action_space == msrl.Discrete(15)
    assert env.state_dim == 51 and env.max_episode_steps == 100
    on_torch = msrl.envs.make("Tag-v0", num_envs=2, backend="torch")
    assert isinstance(on_torch, Tag) and on_torch.dtype == torch.float32 and on_torch.device == torch.device("cpu")
    assert {"numpy", "torch"} <= set(msrl.envs.backends("Tag-v0"))
    described = msrl.envs.spec("Tag-v0", num_runners=3, num_observed=2)
    assert described.num_agents == 5 and described.groups["runners"].observation_space.shape == (17,)

    defines = make(1, num_observed=3, runner_exits_game_after_tagged=False).kernel_defines()
    names = [
        "NUM_TAGGERS",
        "NUM_RUNNERS",
        "WORLD_SIZE",
        "MAX_EPISODE_STEPS",
        "NUM_ACCELERATION_LEVELS",
        "MIN_ACCELERATION",
        "MAX_ACCELERATION",
        "NUM_TURN_LEVELS",
        "MIN_TURN",
        "MAX_TURN",
        "TAGGER_MAX_SPEED",
        "RUNNER_MAX_SPEED",
        "TAGGING_DISTANCE",
        "TAG_REWARD_FOR_TAGGER",
        "TAG_PENALTY_FOR_RUNNER",
        "STEP_PENALTY_FOR_TAGGER",
        "STEP_REWARD_FOR_RUNNER",
        "EDGE_HIT_PENALTY",
        "END_OF_GAME_REWARD_FOR_RUNNER",
        "RUNNER_EXITS",
        "NUM_OBSERVED",
    ]
    assert set(defines) == {f"TAG_{name}" for name in names}
    assert defines["TAG_NUM_OBSERVED"] == 3 and defines["TAG_RUNNER_EXITS"] == 0
    assert float(defines["TAG_MIN_TURN"]) == -math.pi / 4  # round-trips exactly
    for num_observed in (0, 9, 50):  # all others
        assert make(1, num_observed=num_observed).kernel_defines()["TAG_NUM_OBSERVED"] == 9


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_taggers": 0}, "num_taggers must be an integer >= 1, got 0"),
        ({"num_runners": 2.0}, "num_runners must be an integer >= 1"),
        ({"num_runners": True}, "num_runners must be an integer >= 1"),
        ({"world_size": 0.0}, "world_size must be a finite number > 0"),
        ({"world_size": math.inf}, "world_size must be a finite number > 0"),
        ({"max_episode_steps": 0}, "max_episode_steps must be an integer >= 1"),
        ({"num_acceleration_levels": 0}, "num_acceleration_levels must be an integer >= 1"),
        ({"num_turn_levels": -1}, "num_turn_levels must be an integer >= 1"),
        ({"min_acceleration": 1.0}, "min_acceleration must be <= max_acceleration"),
        ({"max_turn": -1.0}, "min_turn must be <= max_turn"),
        ({"tagger_max_speed": 0}, "tagger_max_speed must be a finite number > 0"),
        ({"tagging_distance": -1.0}, "tagging_distance must be a finite number >= 0"),
        ({"edge_hit_penalty": "x"}, "edge_hit_penalty must be a finite number"),
        ({"step_reward_for_runner": math.nan}, "step_reward_for_runner must be a finite number"),
        ({"runner_exits_game_after_tagged": 1}, "runner_exits_game_after_tagged must be True or False"),
        ({"num_observed": -1}, "num_observed must be an integer >= 0"),
    ],
)
def test_bad_constants_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        make(1, **kwargs)
    assert "\n" not in str(info.value) and str(info.value).startswith("Tag-v0 ")


def test_bad_actions_name_the_group():
    env = make(2)
    with pytest.raises(EnvError, match="group 'runners' expects actions of shape \\(2, 8\\)"):
        env.step({"taggers": np.zeros((2, 2), int), "runners": np.zeros((2, 7), int)})
    with pytest.raises(EnvError, match="integers in \\[0, 14\\]"):
        env.step({"taggers": np.full((2, 2), 15), "runners": np.zeros((2, 8), int)})
    with pytest.raises(EnvError, match="integers in \\[0, 14\\]"):
        make(2, "torch-f32", validate=True).step({"taggers": np.full((2, 2), 15), "runners": np.zeros((2, 8), int)})
    # unvalidated torch (no sync to check values) clamps into range
    clamped, reference = make(2, "torch-f64"), make(2, "torch-f64")
    out = clamped.step({"taggers": torch.tensor([[99, -5]] * 2), "runners": torch.zeros((2, 8), dtype=torch.int64)})
    expected = reference.step(
        {"taggers": torch.tensor([[14, 0]] * 2), "runners": torch.zeros((2, 8), dtype=torch.int64)}
    )
    assert torch.equal(clamped.get_state(), reference.get_state()) and torch.equal(
        out[1]["taggers"], expected[1]["taggers"]
    )


# -- the rules on hand-built states ------------------------------------------------------


def test_movement_heading_wrap_and_speed_clip(backend):
    env = make(1, backend, num_taggers=1, num_runners=2)
    heading0 = [TWO_PI - 0.1, 0.1, 1.0]
    env.set_state(state(x=[5.0, 2.0, 8.0], y=[5.0, 2.0, 2.0], speed=[0.5, 0.7, 0.2], heading=heading0))
    # tagger: +0.5 acceleration, +pi/4 turn (wraps past 2 pi); runner 1: +0.5, -pi/4 (wraps below 0);
    # runner 2: -0.5, no turn (speed clipped at 0)
    _, reward, terminated, truncated = step(env, [2 * 5 + 4, 2 * 5 + 0, 0 * 5 + 2])
    x, y, speed, heading, active, t = split(env, np_(env.get_state())[0])
    expected_heading = [h - TWO_PI * math.floor(h / TWO_PI) for h in (TWO_PI - 0.1 + math.pi / 4, 0.1 - math.pi / 4)]
    assert 0 < expected_heading[0] < 1 and 5 < expected_heading[1] < TWO_PI
    np.testing.assert_allclose(heading, [*expected_heading, 1.0], **close(backend))
    np.testing.assert_allclose(speed, [1.0, 0.8, 0.0], **close(backend))  # tagger and runner capped, runner 2 at 0
    np.testing.assert_allclose(
        x, [5 + math.cos(expected_heading[0]), 2 + 0.8 * math.cos(expected_heading[1]), 8.0], **close(backend)
    )
    np.testing.assert_allclose(
        y, [5 + math.sin(expected_heading[0]), 2 + 0.8 * math.sin(expected_heading[1]), 2.0], **close(backend)
    )
    np.testing.assert_allclose(reward, np.float32([-0.01, 0.01, 0.01]), **close(backend))
    assert (terminated, truncated, t) == (0.0, 0.0, 1.0)
    np.testing.assert_array_equal(active, 1.0)


def test_edge_clip_and_penalty_once_per_step(backend):
    env = make(1, backend, num_taggers=1, num_runners=3)
    env.set_state(
        state(
            x=[9.8, 0.1, 5.0, 5.0],
            y=[9.8, 5.0, 0.3, 2.0],
            speed=[1.0, 0.5, 0.5, 0.5],
            heading=[math.pi / 4, math.pi, 1.5 * math.pi, 0.0],
        )
    )
    _, reward, _, _ = step(env, [NOOP] * 4)
    x, y, speed, *_ = split(env, np_(env.get_state())[0])
    np.testing.assert_allclose(x[:2], [10.0, 0.0])  # clipped onto the edges
    np.testing.assert_allclose(y[:3], [10.0, 5.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(speed, [1.0, 0.5, 0.5, 0.5], **close(backend))  # clipping keeps the speed
    np.testing.assert_allclose(x[3], 5.5, **close(backend))
    # the tagger left through the corner: one penalty, not two
    np.testing.assert_allclose(reward, np.float32([-0.1 + -0.01, -0.1 + 0.01, -0.1 + 0.01, 0.01]), **close(backend))


def test_tagging_within_distance_inclusive_and_rewards_per_runner(backend):
    env = make(1, backend, num_taggers=2, num_runners=4)
    # taggers at (5, 5) and (5, 7); runner A exactly 1.0 from tagger 0, B 1.0 from both,
    # C 1.001 from tagger 0, D far away; nobody moves (speed 0, no acceleration)
    env.set_state(state(x=[5.0, 5.0, 6.0, 5.0, 3.999, 8.0], y=[5.0, 7.0, 5.0, 6.0, 5.0, 9.5]))
    _, reward, terminated, _ = step(env, [NOOP] * 6)
    np.testing.assert_allclose(
        reward, np.float32([-0.01 + 2.0, -0.01 + 1.0, 0.01 - 1.0, 0.01 - 1.0, 0.01, 0.01]), **close(backend)
    )
    assert terminated == 0.0
    active = split(env, np_(env.get_state())[0])[4]
    np.testing.assert_array_equal(active, [1, 1, 0, 0, 1, 1])
    # Tagged runners are out: they neither move (full acceleration) nor earn, nor get tagged again.
    obs, reward, _, _ = step(env, [NOOP, NOOP, 2 * 5 + 2, 2 * 5 + 2, NOOP, NOOP])
    x, y, speed, *_ = split(env, np_(env.get_state())[0])
    np.testing.assert_array_equal([x[2], y[2], x[3], y[3], speed[2]], [6.0, 5.0, 5.0, 6.0, 0.0])
    np.testing.assert_allclose(reward, np.float32([-0.01, -0.01, 0.0, 0.0, 0.01, 0.01]), **close(backend))
    np.testing.assert_array_equal(obs["runners"][0, :2, 5], 0.0)  # they see themselves inactive


def test_runners_stay_in_the_game_when_they_do_not_exit(backend):
    env = make(1, backend, num_taggers=1, num_runners=1, runner_exits_game_after_tagged=False)
    env.set_state(state(x=[5.0, 5.5], y=[5.0, 5.0]))
    for _ in range(2):  # tagged again and again, the episode goes on
        _, reward, terminated, _ = step(env, [NOOP, NOOP])
        np.testing.assert_allclose(reward, np.float32([-0.01 + 1.0, 0.01 - 1.0]), **close(backend))
        assert terminated == 0.0
    assert split(env, np_(env.get_state())[0])[4].tolist() == [1.0, 1.0]


def test_terminates_when_no_runner_is_left(backend):
    env = make(1, backend, num_taggers=1, num_runners=2)
    env.set_state(state(x=[5.0, 5.5, 9.0], y=[5.0, 5.0, 9.0], active=[1.0, 1.0, 0.0], t=40.0))
    obs, reward, terminated, truncated = step(env, [NOOP] * 3)
    assert (terminated, truncated) == (1.0, 0.0)
    np.testing.assert_allclose(reward, np.float32([-0.01 + 1.0, 0.01 - 1.0, 0.0]), **close(backend))
    # restarted in the same step: the observation is the next episode's first
    assert (obs["taggers"][0, :, 6] == 0).all() and (obs["runners"][0, :, 5] == 1).all()
    *_, speed, _, active, t = split(env, np_(env.get_state())[0])
    assert t == 0.0 and (active == 1).all() and (speed == 0).all()
    m = env.metrics()
    assert m["episodes"] == 1 and m["episode_length"] == 1
    assert m["episode_return/taggers"] == pytest.approx(0.99) and m["episode_return/runners"] == pytest.approx(-0.495)


def test_truncation_and_end_of_game_bonus(backend):
    env = make(1, backend, num_taggers=1, num_runners=2, max_episode_steps=3)
    env.set_state(state(x=[5.0, 5.5, 9.0], y=[5.0, 5.0, 9.0]))  # runner 1 is tagged in the first step
    flags, rewards = [], []
    for _ in range(3):
        obs, reward, terminated, truncated = step(env, [NOOP] * 3)
        flags.append((terminated, truncated))
        rewards.append(reward)
        if len(flags) == 2:
            np.testing.assert_allclose(obs["runners"][0, :, 6], 2 / 3)  # t / max_episode_steps
    assert flags == [(0.0, 0.0), (0.0, 0.0), (0.0, 1.0)]
    np.testing.assert_allclose(rewards[1], np.float32([-0.01, 0.0, 0.01]), **close(backend))
    # only the runner still in the game gets the bonus
    np.testing.assert_allclose(rewards[2], np.float32([-0.01, 0.0, 0.01 + 1.0]), **close(backend))
    assert env.metrics()["episode_return/runners"] == pytest.approx((-0.99 + 1.03) / 2)


# -- observations ---------------------------------------------------------------------------


def test_observation_layout_all_others(backend):
    env = make(1, backend, num_taggers=1, num_runners=2, world_size=8.0, max_episode_steps=50)
    row = state(
        x=[4.0, 6.0, 1.0],
        y=[2.0, 3.0, 7.0],
        speed=[0.5, 0.4, 0.2],
        heading=[0.0, math.pi / 2, 1.0],
        active=[1.0, 1.0, 0.0],
        t=10.0,
    )
    env.set_state(row)
    obs = np_(env.observe())
    assert obs["taggers"].shape == (1, 1, 17) and obs["runners"].shape == (1, 2, 17)
    tagger, runner = obs["taggers"][0, 0], obs["runners"][0, 0]
    np.testing.assert_allclose(tagger[:7], [0.5, 0.25, 0.5, 1.0, 0.0, 1.0, 0.2], atol=1e-7)
    np.testing.assert_allclose(tagger[7:12], [0.25, 0.125, 0.5, 0.0, 1.0])  # runner 1 (speed 0.4 of 0.8)
    np.testing.assert_allclose(tagger[12:], [-0.375, 0.625, 0.25, 0.0, 0.0])  # runner 2, inactive
    np.testing.assert_allclose(runner[:7], [0.75, 0.375, 0.5, 0.0, 1.0, 1.0, 0.2], atol=1e-7)
    np.testing.assert_allclose(runner[7:12], [-0.25, -0.125, 0.5, 1.0, 1.0])  # the tagger first: index order
    np.testing.assert_allclose(obs_rows(obs, 0), reference_obs(env, row[0]), **close(backend))


def test_nearest_others_break_ties_by_index_and_put_inactive_last(backend):
    env = make(1, backend, num_taggers=1, num_runners=5, num_observed=3)
    #        tagger, r1 (d 1), r2 (d 1, tie), r3 (d 0.25), r4 (inactive, d 0), r5 (d 32)
    row = state(
        x=[5.0, 6.0, 5.0, 5.0, 5.0, 9.0], y=[5.0, 5.0, 6.0, 5.5, 5.0, 9.0], active=[1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    )
    env.set_state(row)
    obs = np_(env.observe())
    assert obs["taggers"].shape == (1, 1, 22)
    seen = obs["taggers"][0, 0, 7:].reshape(3, 5)
    np.testing.assert_allclose(seen[:, :2], [[0.0, 0.05], [0.1, 0.0], [0.0, 0.1]])  # r3, then r1 before r2
    # With only the tagger and r5 active, r5 sees the tagger, then the inactive others by index.
    row[0, 4 * 6 + 1 : 4 * 6 + 4] = 0.0
    env.set_state(row)
    obs = np_(env.observe())
    r5 = obs["runners"][0, 4, 7:].reshape(3, 5)
    np.testing.assert_allclose(r5[:, :2], [[-0.4, -0.4], [-0.3, -0.4], [-0.4, -0.3]], rtol=1e-6)  # tagger, r1, r2
    np.testing.assert_array_equal(r5[:, 4], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(obs_rows(obs, 0), reference_obs(env, row[0]), **close(backend))


@pytest.mark.parametrize("num_runners, num_observed", [(7, 3), (47, 5)])  # a full sort, then the partition path
def test_observations_match_the_reference(backend, num_runners, num_observed):
    env = make(6, backend, num_taggers=3, num_runners=num_runners, num_observed=num_observed)
    rng = np.random.default_rng(num_runners)
    states = random_states(env, rng, grid=1.0)
    states[0, 4 * env.num_agents + 3 : 5 * env.num_agents] = 0.0  # every runner out: inactive ones fill the places
    env.set_state(states)
    obs = env.observe()
    for e in range(env.num_envs):
        np.testing.assert_allclose(obs_rows(obs, e), reference_obs(env, states[e]), **close(backend))


def test_step_matches_the_reference():
    env = make(5, num_taggers=2, num_runners=4, tagging_distance=2.5, max_episode_steps=6)
    rng = np.random.default_rng(1)
    for _ in range(12):
        before = random_states(env, rng)
        env.set_state(before)  # a new episode: the time limit stays far
        acts = {g: rng.integers(0, 15, (5, grp.num_agents)) for g, grp in env.groups.items()}
        obs, rewards, terminated, _ = env.step(acts)
        after = env.get_state()
        for e in range(5):
            new, reward, term = reference_step(env, before[e], [*acts["taggers"][e], *acts["runners"][e]])
            np.testing.assert_array_equal(
                np.concatenate([rewards["taggers"][e], rewards["runners"][e]]), np.float32(reward)
            )
            assert terminated[e] == term
            if not term:  # else it restarted
                np.testing.assert_allclose(after[e], new, rtol=1e-15, atol=1e-15)
                np.testing.assert_allclose(obs_rows(obs, e), reference_obs(env, new), rtol=1e-6, atol=1e-7)


# -- backends, resets, checkpoints, chunks -----------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_observed": 3, "runner_exits_game_after_tagged": False},
        {"num_taggers": 4, "num_runners": 36, "num_observed": 6, "tagging_distance": 2.0, "max_episode_steps": 30},
    ],
)
def test_numpy_and_torch_agree_step_for_step(kwargs):
    ref = make(8, "numpy", seed=1, **kwargs)
    exact = check_consistency(ref, make(8, "torch-f64", seed=2, **kwargs), 80, seed=3)
    assert exact.ok, exact
    # float32: small rounding; a threshold met within rounding (an edge, the tagging distance,
    # two equal distances) may rarely decide differently, so a few values may differ more.
    single = check_consistency(
        ref, make(8, "torch-f32", seed=2, **kwargs), 80, seed=3, atol=1e-5, rtol=1e-5, resync_every=1
    )
    compared = 80 * 8 * ref.num_agents * (7 + 5 * ref.observed)
    assert single.tolerance_violations["obs"] <= 1e-4 * compared, single
    assert single.tolerance_violations["reward"] <= 2 and single.flag_mismatch_fraction <= 1e-3, single


def test_reset_distribution(backend):
    kwargs = {"num_taggers": 2, "num_runners": 3, "world_size": 6.0}
    env = make(400, backend, seed=3, **kwargs)
    x, y, speed, heading, active, t = split(env, np_(env.get_state()).T)
    for values, high in ((x, 6.0), (y, 6.0), (heading, TWO_PI)):
        assert values.min() >= 0 and values.max() < high
        assert abs(values.mean() - high / 2) < 0.03 * high and abs(values.std() - high / math.sqrt(12)) < 0.03 * high
    assert (speed == 0).all() and (active == 1).all() and (t == 0).all()
    assert not np.array_equal(np_(make(400, backend, seed=4, **kwargs).get_state()), np_(env.get_state()))
    np.testing.assert_array_equal(np_(make(400, backend, seed=3, **kwargs).get_state()), np_(env.get_state()))


def rollout(env: Tag, steps: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        acts = {g: rng.integers(0, 15, (env.num_envs, grp.num_agents)) for g, grp in env.groups.items()}
        obs, rewards, terminated, truncated = env.step(acts)
        out += [*np_(obs).values(), *np_(rewards).values(), np_(terminated), np_(truncated)]
    return out


def test_checkpoint_resumes_exactly(backend):
    kwargs = {"num_runners": 3, "max_episode_steps": 7, "tagging_distance": 3.0}
    env = make(4, backend, seed=1, **kwargs)
    rollout(env, 9, seed=1)
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    restored = make(4, backend, seed=99, **kwargs)
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    a, b = rollout(env, 20, seed=2), rollout(restored, 20, seed=2)  # through resets: the generator resumes too
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    metrics = env.metrics()
    assert metrics == restored.metrics() and metrics["episodes"] >= 4


@pytest.mark.parametrize("backend_name", ["numpy", "torch-f64"])
@pytest.mark.parametrize("num_observed", [0, 4])
def test_chunks_change_nothing(backend_name, num_observed):
    kwargs = {"num_taggers": 3, "num_runners": 37, "num_observed": num_observed}
    whole, chunked = make(9, backend_name, **kwargs), make(9, backend_name, **kwargs)
    chunked.dynamics.physics.chunk_bytes = 1  # one environment per chunk
    assert all(np.array_equal(x, y) for x, y in zip(rollout(whole, 5, 0), rollout(chunked, 5, 0)))


def test_temporaries_stay_within_the_chunk_budget():
    env = make(32, num_taggers=60, num_runners=240, num_observed=4)
    env.dynamics.physics.chunk_bytes = 2**20
    acts = {g: np.full((32, grp.num_agents), NOOP) for g, grp in env.groups.items()}
    env.step(acts)
    tracemalloc.start()
    try:
        env.step(acts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Unchunked, the coordinate differences alone would take 32 envs x 300 x 300 pairs x 2 x 8 bytes = 46 MB;
    # one environment's temporaries plus the outputs (1 MB of observations) stay near 6 MB.
    assert peak < 8e6, peak


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_step_does_not_sync_on_cuda():
    env = msrl.envs.make("Tag-v0", num_envs=64, seed=0, backend="torch", device="cuda", num_runners=40, num_observed=5)
    acts = {g: torch.zeros((64, grp.num_agents), dtype=torch.int64, device="cuda") for g, grp in env.groups.items()}
    env.step(acts)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            env.step(acts)
    finally:
        torch.cuda.set_sync_debug_mode("default")
