"""The frame replay buffer: stacked frames stored once each, sampled exactly as inserted."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from frame_games import SIDE, STACK, Games, assert_matches, fill

from msrl.rl import FrameReplayBuffer, PrioritizedFrameReplayBuffer, ReplayBuffer


@pytest.mark.parametrize("final_obs, frames", [(True, None), (False, None), (True, 64)])
def test_live_transitions_are_the_newest_ones_exactly_as_inserted(final_obs: bool, frames: int | None) -> None:
    """Through many wraps of both rings, still screens longer than the sharing horizon, and
    episodes cut by time limits, the buffer holds the newest transitions, each frame for frame
    as inserted, and nearly as many as its capacity or its frames allow (64 frames: fewer
    than the transitions need, so transitions are dropped for their frames)."""
    games = Games(3, seed=0)
    buffer = FrameReplayBuffer(
        60, (STACK, SIDE, SIDE), batch_size=32, num_batches=2, final_obs=final_obs, horizon=24, frames=frames
    )
    record: list = []
    for _ in range(40):
        fill(buffer, games, 5, record)
        held = buffer.transitions()
        ids = held.rewards.long().tolist()
        assert ids == list(range(len(record) - len(ids), len(record)))  # the newest, oldest first
        assert_matches(held, record)
        assert_matches(buffer.sample(), record)
    # Dropped only when full or for frames the ring may overwrite (a bound that is conservative
    # by up to a batch's frames): about as many as it can hold.
    room = (buffer.num_frames - buffer.horizon) / buffer.frames_per_transition
    assert len(buffer) >= (1.0 if frames is None else 0.6) * min(buffer.capacity, room)
    assert buffer.frames_per_transition < 1.5  # shared: a stored stack alone is 4 frames


def test_one_new_frame_per_step_of_a_game_that_goes_on() -> None:
    games = Games(2, seed=1)
    games.left[:] = 10**6  # no episode ends
    buffer = FrameReplayBuffer(1000, (STACK, SIDE, SIDE), final_obs=True)
    fill(buffer, games, 200, [])
    # two starting stacks, then at most one frame per step and game (none on a still screen)
    assert buffer.written <= 2 * 2 * STACK + 2 * 200
    assert buffer.frames_per_transition < 1.0


def test_samples_as_the_replay_buffer_does_until_it_wraps() -> None:
    """Same seed, same stream, not yet full: the same batches as ``ReplayBuffer``."""
    frames = FrameReplayBuffer(500, (STACK, SIDE, SIDE), batch_size=16, num_batches=3, learning_starts=20, seed=7)
    plain = ReplayBuffer(
        500, (STACK, SIDE, SIDE), batch_size=16, num_batches=3, learning_starts=20, seed=7, obs_dtype=torch.uint8
    )
    a, b = Games(2, seed=2), Games(2, seed=2)
    for _ in range(30):
        fill(frames, a, 3, [])
        fill(plain, b, 3, [])
        for x, y in zip(frames.sample(), plain.sample()):
            torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_checkpoint_round_trip_continues_identically() -> None:
    games = Games(2, seed=3)
    buffer = FrameReplayBuffer(80, (STACK, SIDE, SIDE), batch_size=8, seed=1, final_obs=True, horizon=16)
    record: list = []
    fill(buffer, games, 150, record)
    twin = copy.deepcopy(games)
    restored = FrameReplayBuffer(80, (STACK, SIDE, SIDE), batch_size=8, seed=99, final_obs=True, horizon=16)
    restored.load_state_dict(buffer.state_dict())
    for x, y in zip(restored.transitions(), buffer.transitions()):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    twin_record: list = list(record)
    fill(buffer, games, 40, record)
    fill(restored, twin, 40, twin_record)
    for x, y in zip(restored.transitions(), buffer.transitions()):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    for x, y in zip(restored.sample(), buffer.sample()):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_a_million_atari_transitions_fit_in_about_seven_gigabytes() -> None:
    frames = FrameReplayBuffer.bytes_needed(1_000_000, (4, 84, 84))
    whole = 1_000_000 * 2 * 4 * 84 * 84
    assert frames < 7.5e9
    assert whole / frames > 7


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="stack"):
        FrameReplayBuffer(10, (16,))
    buffer = FrameReplayBuffer(10, (STACK, SIDE, SIDE), horizon=4, frames=64)
    games = Games(2, seed=0)
    fill(buffer, games, 1, [])
    with pytest.raises(ValueError, match="holds 2 games"):
        fill(buffer, Games(3, seed=0), 1, [])
    with pytest.raises(ValueError, match="do not fit"):
        fill(FrameReplayBuffer(10, (STACK, SIDE, SIDE), horizon=4, frames=64), Games(8, seed=0), 1, [])


def test_pong_writes_about_one_frame_per_transition_and_keeps_its_capacity() -> None:
    """Real Atari frames (two Pong games, same-step autoreset, each game's last frames from
    ``final_obs``): about one new 84x84 frame per transition, the buffer full at its capacity
    once it has wrapped, and what it holds is what was inserted; with Rainbow's 3-step returns and
    prioritized sampling, still about one frame per transition (each game's first stacks are written
    in both of its streams: a few more on these 200-step games)."""
    pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")
    import msrl.envs

    env = msrl.envs.make("ALE/Pong-v5", 2, seed=0, max_episode_frames=800)  # games cut at 200 steps
    buffer = FrameReplayBuffer(300, env.observation_space.shape, final_obs=True)
    rainbow = PrioritizedFrameReplayBuffer(300, env.observation_space.shape, final_obs=True, n_step=3)
    rng, record = np.random.default_rng(0), []
    obs = env.observe().copy()
    for _ in range(250):
        action = rng.integers(0, 6, 2)
        next_obs, _, terminated, truncated = env.step(action)
        last = env.final_obs().copy()
        ids = np.arange(len(record), len(record) + 2, dtype=np.float32)
        record += [(obs[g], last[g], action[g], terminated[g]) for g in range(2)]
        buffer.insert(obs, action, ids, last, terminated, truncated)
        rainbow.insert(obs, action, ids, last, terminated, truncated)
        obs = next_obs.copy()
    assert len(buffer) == buffer.capacity
    # 3-step: each game's first stacks written in both streams; at this capacity the sharing horizon
    # takes 256 of the 565 frame slots, so a few transitions go for their frames
    assert len(rainbow) >= 0.95 * rainbow.capacity
    assert buffer.frames_per_transition < 1.05 and rainbow.frames_per_transition < 1.1  # games of 200 steps
    assert_matches(buffer.transitions(), record, shape=(4, 84, 84))


def test_dqn_stores_atari_frames_once_and_minatar_observations_whole(tmp_path) -> None:
    """DQN picks the frame replay where the environment says its observations are a frame stack
    (Atari), the prioritized n-step one under the shipped Rainbow config, and the plain one where
    they are not (MinAtar's channels are objects, not time)."""
    pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")
    pytest.importorskip("minatar", reason="the atari extra (minatar) is not installed")
    from pathlib import Path

    from msrl.app import Trainer

    config = str(Path(__file__).resolve().parents[2] / "configs" / "dqn_atari.yaml")
    small = [f"runs_dir={tmp_path}", "progress=false", "algo.buffer_size=500", "algo.learning_starts=40"]
    small += ["algo.compile=false", "total_env_steps=64"]
    with Trainer(config, small) as trainer:
        buffer = trainer.runtime.algorithm.buffer
        assert isinstance(buffer, FrameReplayBuffer)
        trainer.run()
        assert 0 < len(buffer) and buffer.frames_per_transition < 1.2
        assert trainer.runtime.algorithm.learner.gradient_steps_taken > 0
    rainbow = config.replace("dqn_atari", "dqn_rainbow_atari")
    with Trainer(rainbow, small) as trainer:  # Rainbow's options on frames: the frame replay's twin
        buffer = trainer.runtime.algorithm.buffer
        assert isinstance(buffer, PrioritizedFrameReplayBuffer) and buffer.n_step is not None
        trainer.run()
        assert 0 < len(buffer) and buffer.frames_per_transition < 1.3
        assert trainer.runtime.algorithm.learner.gradient_steps_taken > 0
        assert buffer.tree.total > 0
    minatar = small + ["algo.env_id=MinAtar/Breakout-v1", "algo.env_kwargs={}", "algo.network=impala_cnn"]
    with Trainer(config, minatar) as trainer:
        assert type(trainer.runtime.algorithm.buffer) is ReplayBuffer


def test_a_checkpoint_without_ring_positions_loads_its_transitions_oldest_first() -> None:
    """A checkpoint that does not say where its transitions sat in the ring (``position``) loads
    them at the first rows, every one as it was."""
    buffer = FrameReplayBuffer(40, (STACK, SIDE, SIDE), batch_size=8, final_obs=True, horizon=16)
    fill(buffer, Games(2, seed=5), 60, [])
    state = buffer.state_dict()
    del state["position"]
    restored = FrameReplayBuffer(40, (STACK, SIDE, SIDE), batch_size=8, final_obs=True, horizon=16)
    restored.load_state_dict(state)
    assert restored.position == len(restored) % restored.capacity
    for x, y in zip(restored.transitions(), buffer.transitions()):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
