"""The pixel environments: ``ALE/<Game>-v5`` over ale-py's vector environment and
``MinAtar/<Game>-v1``.

The Atari backend is held against gymnasium's own preprocessing of the same emulator
(``AtariPreprocessing`` and ``FrameStackObservation`` over ``gymnasium.make``): with the random
parts off (no sticky actions, no no-op starts) the two must give the same frames, rewards and
game ends, step for step, and the last frame of a game must be the one ``final_obs`` gives.
What msrl adds on top (reward clipping for the learner, episodic life, uint8 end to end, one
line for bad input) is checked against the same environment with it off."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import msrl.envs
from msrl.core import ConfigError
from msrl.rl import as_observation

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")

REPO = Path(__file__).resolve().parents[2]
PLAIN = dict(repeat_action_probability=0.0, noop_max=0, reward_clipping=False)
"""The Atari backend with its random parts and clipping off: what gymnasium's wrappers reproduce."""


def _reference(env_id: str, seed: int):
    pytest.importorskip("cv2", reason="gymnasium's AtariPreprocessing needs opencv-python-headless")
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    base = gym.make(env_id, frameskip=1, repeat_action_probability=0.0)
    env = FrameStackObservation(
        AtariPreprocessing(base, noop_max=0, frame_skip=4, screen_size=84), 4, padding_type="zero"
    )
    return env, env.reset(seed=seed)[0]


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", pytest.param("ALE/Breakout-v5", marks=pytest.mark.slow)])
def test_the_backend_steps_as_gymnasiums_preprocessing_of_the_same_emulator(env_id: str) -> None:
    envs = msrl.envs.make(env_id, 2, seed=0, **PLAIN)
    references, first = zip(*(_reference(env_id, seed) for seed in range(2)))
    assert envs.observe().shape == (2, 4, 84, 84) and np.array_equal(envs.observe(), np.stack(first))
    rng = np.random.default_rng(0)
    live = [True, True]
    compared = 0
    for _ in range(400):
        actions = rng.integers(0, envs.action_space.n, 2)
        obs, reward, terminated, truncated = envs.step(actions)
        final = envs.final_obs()
        for row, ref in enumerate(references):
            if not live[row]:
                continue
            ref_obs, ref_reward, ref_terminated, ref_truncated, _ = ref.step(int(actions[row]))
            assert reward[row] == ref_reward and terminated[row] == ref_terminated, (row, compared)
            if ref_terminated or ref_truncated:
                assert np.array_equal(final[row], ref_obs)  # the game's last frames, not the next game's first
                live[row] = False
            else:
                assert np.array_equal(obs[row], ref_obs), (row, compared)
            compared += 1
    assert compared > 300
    assert obs.dtype == np.uint8 and reward.dtype == np.float32 and terminated.dtype == np.float32


def test_rewards_are_clipped_for_the_learner_and_episodes_report_the_score() -> None:
    """Space Invaders scores 5 to 30 a hit: clipped rewards are their sign, the returns reported the same
    as the unclipped environment's (games cut at 400 steps, so that some end)."""
    options = dict(repeat_action_probability=0.0, noop_max=0, max_episode_frames=1600)
    clipped = msrl.envs.make("ALE/SpaceInvaders-v5", 2, seed=1, **options)
    raw = msrl.envs.make("ALE/SpaceInvaders-v5", 2, seed=1, reward_clipping=False, **options)
    rng = np.random.default_rng(1)
    seen = set()
    for _ in range(420):
        action = rng.integers(0, 6, 2)
        clipped_reward = clipped.step(action)[1]
        raw_reward = raw.step(action)[1]
        assert np.array_equal(clipped_reward, np.sign(raw_reward))
        seen |= set(raw_reward.tolist())
    assert max(seen) > 1  # a hit scored more than the clip
    got, want = clipped.metrics(), raw.metrics()
    assert want["episodes"] >= 1 and got == want and want["episode_return"] > 1


def test_episodic_life_ends_the_learners_episode_on_a_lost_life_but_counts_whole_games() -> None:
    options = dict(repeat_action_probability=0.0, noop_max=0, fire_reset=True)
    lives = msrl.envs.make("ALE/Breakout-v5", 2, seed=2, episodic_life=True, **options)
    games = msrl.envs.make("ALE/Breakout-v5", 2, seed=2, **options)
    rng = np.random.default_rng(2)
    life_ends = game_ends = 0
    for _ in range(600):
        action = rng.integers(0, 4, 2)
        obs, _, terminated, _ = lives.step(action)
        game_obs, _, game_over, _ = games.step(action)
        assert np.array_equal(obs, game_obs)  # a lost life plays on: the same frames as without the option
        assert np.all(terminated >= game_over)
        life_ends += int(terminated.sum())
        game_ends += int(game_over.sum())
    assert game_ends >= 1 and life_ends >= 4 * game_ends  # Breakout has five lives
    assert lives.metrics() == games.metrics()


def test_frames_are_uint8_from_the_emulator_to_torch_without_a_copy() -> None:
    env = msrl.envs.make("ALE/Pong-v5", 2, seed=0)
    assert env.observation_space.dtype == "uint8" and env.observation_space.shape == (4, 84, 84)
    obs = env.step(np.zeros(2, np.int64))[0]
    tensor = as_observation(obs, torch.device("cpu"))
    assert tensor.dtype == torch.uint8 and np.shares_memory(tensor.numpy(), obs)


def test_a_seed_repeats_the_games_and_a_checkpoint_restarts_them_reproducibly() -> None:
    def run(env, steps: int = 50) -> list[np.ndarray]:
        rng = np.random.default_rng(3)
        return [env.step(rng.integers(0, 6, 2))[0].copy() for _ in range(steps)]

    first, second = (msrl.envs.make("ALE/Pong-v5", 2, seed=4) for _ in range(2))
    assert all(np.array_equal(a, b) for a, b in zip(run(first), run(second)))  # sticky actions, no-ops: seeded
    state = first.state_dict()
    restored = msrl.envs.make("ALE/Pong-v5", 2, seed=9)
    restored.load_state_dict(state)
    again = msrl.envs.make("ALE/Pong-v5", 2, seed=9)
    again.load_state_dict(state)
    assert all(np.array_equal(a, b) for a, b in zip(run(restored), run(again)))


def test_bad_atari_input_is_one_line_naming_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"no game 'pongg'.*close matches: ALE/Pong-v5"):
        msrl.envs.make("ALE/Pongg-v5", 1)
    with pytest.raises(ConfigError, match="ALE/Pong-v5 takes no keyword 'sticky'"):
        msrl.envs.make("ALE/Pong-v5", 1, sticky=0.1)
    with pytest.raises(ConfigError, match=r"MinAtar has no game 'Breakot'.*MinAtar/Breakout-v1"):
        msrl.envs.make("MinAtar/Breakot-v1", 1)
    with pytest.raises(ConfigError, match="ALE/<Game>-v5"):
        msrl.envs.make("Zzqxw-v9", 1)
    monkeypatch.setitem(sys.modules, "ale_py", None)  # as on a machine without the atari extra
    monkeypatch.setitem(sys.modules, "ale_py.roms", None)
    with pytest.raises(ConfigError, match=r'need ale-py, which is not installed: pip install "msrl\[atari\]"'):
        msrl.envs.make("ALE/Breakout-v5", 1)


@pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="the atari extra (minatar) is not installed")
def test_minatar_games_are_seeded_channel_first_uint8_frames() -> None:
    envs = [msrl.envs.make("MinAtar/Breakout-v1", 4, seed=5) for _ in range(2)]
    assert envs[0].observation_space.shape == (4, 10, 10) and envs[0].action_space.n == 3
    assert float(envs[0].observation_space.high) == 1.0  # one bit per object channel: scaled by 1, not 1/255
    rng = np.random.default_rng(5)
    for _ in range(150):
        action = rng.integers(0, 3, 4)
        a, b = (env.step(action) for env in envs)
        for x, y in zip(a, b):
            assert np.array_equal(x, y)
    obs = a[0]
    assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 1}
    metrics = envs[0].metrics()
    assert metrics["episodes"] >= 4 and metrics == envs[1].metrics()


@pytest.mark.slow  # importing the minatar package (its renderer's seaborn) takes 4 s
def test_minatar_games_step_as_the_minatar_packages_environment() -> None:
    """msrl loads MinAtar's game modules without the package's renderer; the games, their sticky
    actions and their seeding are ``minatar.Environment``'s, frame for frame."""
    minatar = pytest.importorskip("minatar", reason="the atari extra (minatar) is not installed")
    env = msrl.envs.make("MinAtar/Breakout-v1", 4, seed=5)
    references = [minatar.Environment("breakout", sticky_action_prob=0.1) for _ in range(4)]
    for index, reference in enumerate(references):
        reference.seed(5 + index)
        reference.reset()
    action_set = references[0].minimal_action_set()
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(1000):
        actions = rng.integers(0, 3, 4)
        obs, reward, terminated, _ = env.step(actions)
        for row, reference in enumerate(references):
            want_reward, over = reference.act(action_set[actions[row]])
            if over:
                reference.reset()
                ends += 1
            assert reward[row] == want_reward and terminated[row] == over
            assert np.array_equal(obs[row], reference.state().transpose(2, 0, 1))
    assert ends >= 20


def test_a_greedy_evaluation_scores_whole_games_with_their_own_rewards(tmp_path: Path) -> None:
    """Trained with clipped rewards and episodic life (``configs/ppo_atari.yaml``), evaluated on the
    game's score: the evaluation's return is that of the same greedy policy on the environment with
    both off."""
    from msrl.app import Trainer

    game = dict(repeat_action_probability=0.0, max_episode_frames=2400)  # games cut at 600 steps
    overrides = [f"runs_dir={tmp_path}", "progress=false", "algo.env_id=ALE/SpaceInvaders-v5", "algo.compile=false"]
    overrides += [f"algo.env_kwargs.{key}={value}" for key, value in game.items()]
    with Trainer(str(REPO / "configs" / "ppo_atari.yaml"), overrides) as trainer:
        assert trainer.runtime.algorithm.env.episodic_life  # as the shipped config trains
        evaluation = trainer.evaluate(1, seed=11)
        actor = trainer.runtime.algorithm.actor
        env = msrl.envs.make("ALE/SpaceInvaders-v5", 1, seed=11, fire_reset=True, reward_clipping=False, **game)
        obs, rewards, running = env.reset(seed=11), [], True
        while running:
            obs, reward, terminated, truncated = env.step(actor.greedy(obs).numpy())
            rewards.append(float(reward[0]))
            running = not (terminated[0] or truncated[0])
    assert evaluation.returns == [sum(rewards)] and max(rewards) > 1  # unclipped: a hit scores 5 to 30


def test_a_game_restarted_from_a_checkpoint_reports_only_its_own_rewards() -> None:
    """The game running when the checkpoint was taken is dropped on load: the first game the
    restored environment finishes reports what it scored since, not that game's points too."""
    env, rng = msrl.envs.make("MinAtar/Breakout-v1", 1, seed=2), np.random.default_rng(0)
    running = 0.0
    while running <= 0:  # into a game that has scored
        _, reward, terminated, truncated = env.step(rng.integers(0, 3, 1))
        running = 0.0 if terminated[0] or truncated[0] else running + float(reward[0])
    restored = msrl.envs.make("MinAtar/Breakout-v1", 1, seed=5)
    restored.load_state_dict(env.state_dict())
    restored.metrics()
    scored, ended = 0.0, False
    while not ended:
        _, reward, terminated, truncated = restored.step(rng.integers(0, 3, 1))
        scored, ended = scored + float(reward[0]), bool(terminated[0] or truncated[0])
    assert restored.metrics()["episode_return"] == pytest.approx(scored)
