"""Tag-v0 on NumPy and torch: each rule of ``msrl.envs.tag`` on hand-built states (movement,
edges, tagging, termination, truncation, the observation layout and the nearest-others
selection with ties and inactive agents), and the constructor's checks.  The per-agent
reference and the backends step for step are ``test_env_tag_reference.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _tag_reference import (  # tests/unit: pytest puts a test's directory on sys.path
    BACKENDS,
    NOOP,
    TWO_PI,
    close,
    make,
    np_,
    obs_rows,
    reference_obs,
    split,
    state,
    step,
)

import msrl
import msrl.envs
from msrl import ConfigError, EnvError
from msrl.envs.tag import Tag


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    return request.param


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


def test_active_says_who_is_in_the_game_for_the_latest_observation(backend):
    """``active()`` (what MAPPO's active masks read): a tagged runner is out from the step it was
    tagged on, an episode that finished shows its next one (everyone in), and what it returns is a
    copy that later steps leave alone."""
    env = make(2, backend, num_taggers=1, num_runners=2)
    # env 1: runner 2 is already out, so tagging runner 1 ends the episode
    out = state(x=[5.0, 5.5, 9.0], y=[5.0, 5.0, 5.0], active=[1.0, 1.0, 0.0])
    env.set_state(np.concatenate([state(x=[5.0, 5.5, 9.0], y=[5.0, 5.0, 9.0]), out]))
    before = env.active()
    assert np_(before["taggers"]).tolist() == [[1.0], [1.0]]
    assert np_(before["runners"]).tolist() == [[1.0, 1.0], [1.0, 0.0]]
    assert before["runners"].dtype in (np.float32, torch.float32)
    obs, _, terminated, _ = env.step({"taggers": np.array([[NOOP]] * 2), "runners": np.array([[NOOP, NOOP]] * 2)})
    assert np_(terminated).tolist() == [0.0, 1.0]
    after = env.active()
    assert np_(after["runners"]).tolist() == [[0.0, 1.0], [1.0, 1.0]]  # env 1 restarted in the same step
    np.testing.assert_array_equal(np_(after["runners"]), np_(obs["runners"])[:, :, 5])  # what each runner sees
    assert np_(before["runners"]).tolist() == [[1.0, 1.0], [1.0, 0.0]]  # not a view of the state
    after["runners"][0, 1] = 0.0
    assert np_(env.active()["runners"])[0].tolist() == [0.0, 1.0]


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
