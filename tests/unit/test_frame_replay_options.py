"""DQN's replay options on stacked frames: n-step returns (``FrameReplayBuffer(n_step=...)``) and
prioritized sampling (``PrioritizedFrameReplayBuffer``) keep the frame replay's contract (each frame
stored about once, what is sampled exactly what went in) and sample exactly as the whole-observation
replays with the same options do."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from frame_games import SIDE, STACK, Games, assert_matches, fill

from msrl.rl import (
    FrameReplayBuffer,
    NStepReturns,
    PrioritizedBatch,
    PrioritizedFrameReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)

SHAPE = (STACK, SIDE, SIDE)


def steps_of(games: Games, count: int, seed: int) -> list[tuple]:
    """``count`` steps of ``games``: ``(obs, action, reward, next_obs, terminated, truncated)``, each
    game's last observation as ``next_obs`` where its episode ended (``final_obs``)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        obs, last, terminated, truncated, _ = games.step()
        actions = rng.integers(0, 3, games.n)
        rewards = rng.normal(size=games.n).astype(np.float32)
        out.append((obs, actions, rewards, last, terminated, truncated))
    return out


def insert_all(buffer, steps: list[tuple]) -> None:
    for step in steps:
        buffer.insert(*step)


def assert_same(a, b) -> None:
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


@pytest.mark.parametrize("frames", [None, 96])
def test_n_step_transitions_are_the_newest_ones_as_the_windows_made_them(frames: int | None) -> None:
    """Through many wraps (and, with 96 frames, transitions dropped for their frames), the buffer
    holds the newest n-step transitions its windows completed, frame for frame, and about as many
    as its capacity or its frames allow."""
    games = Games(2, seed=4)
    buffer = FrameReplayBuffer(60, SHAPE, final_obs=True, horizon=16, frames=frames, n_step=3, gamma=0.9)
    windows = NStepReturns(3, 0.9, torch.device("cpu"))
    made: list[tuple] = []
    for _ in range(40):
        for step in steps_of(games, 5, seed=len(made)):
            buffer.insert(*step)
            done = windows.step(*(torch.as_tensor(v) for v in step))
            made += list(zip(done.obs, done.actions, done.returns, done.next_obs, done.terminated))
        held = buffer.transitions()
        want = made[len(made) - len(buffer) :]
        assert len(want) == len(buffer) > 0
        torch.testing.assert_close(held.obs, torch.stack([w[0] for w in want]), rtol=0, atol=0)
        torch.testing.assert_close(held.next_obs, torch.stack([w[3] for w in want]), rtol=0, atol=0)
        torch.testing.assert_close(held.actions, torch.stack([w[1] for w in want]), rtol=0, atol=0)
        torch.testing.assert_close(held.rewards, torch.stack([w[2] for w in want]).float(), rtol=0, atol=0)
        torch.testing.assert_close(held.terminated, torch.stack([w[4] for w in want]).float(), rtol=0, atol=0)
    # Transitions are dropped when full or for frames the ring may overwrite, a bound conservative
    # by up to one insert's frames: an episode's end completes up to n transitions a game at once.
    room = (buffer.num_frames - buffer.horizon - 2 * STACK * games.n * 3) / buffer.frames_per_transition
    assert len(buffer) >= min(buffer.capacity, room)
    # These episodes are short (20 steps on average): each one's first stacks are written in both
    # streams (a game that goes on writes about one frame a transition: the next test).
    assert buffer.frames_per_transition < 2.0


def test_an_n_step_game_that_goes_on_writes_about_one_frame_per_transition() -> None:
    """An observation is the next observation stored n transitions earlier: shared, not written again."""
    games = Games(2, seed=1)
    games.left[:] = 10**6  # no episode ends
    buffer = FrameReplayBuffer(1000, SHAPE, final_obs=True, n_step=3)
    insert_all(buffer, steps_of(games, 200, seed=0))
    assert buffer.stored == 2 * (200 - 2)  # each game's first two steps still wait in their windows
    assert buffer.frames_per_transition < 1.05


@pytest.mark.parametrize("final_obs", [True, False])
def test_n_step_samples_as_the_whole_observation_replay_does_until_it_wraps(final_obs: bool) -> None:
    frames = FrameReplayBuffer(500, SHAPE, batch_size=16, num_batches=3, seed=7, final_obs=final_obs, n_step=3)
    plain = ReplayBuffer(
        500, SHAPE, batch_size=16, num_batches=3, seed=7, obs_dtype=torch.uint8, final_obs=final_obs, n_step=3
    )
    steps = steps_of(Games(2, seed=2), 90, seed=2)
    for k in range(30):
        insert_all(frames, steps[3 * k : 3 * k + 3])
        insert_all(plain, steps[3 * k : 3 * k + 3])
        assert_same(frames.sample(), plain.sample())


def test_an_n_step_checkpoint_round_trip_continues_identically() -> None:
    """The windows' waiting steps and each game's recent next observations come back too."""
    games = Games(2, seed=3)
    buffer = FrameReplayBuffer(80, SHAPE, batch_size=8, seed=1, final_obs=True, horizon=16, n_step=3)
    insert_all(buffer, steps_of(games, 150, seed=3))
    twin = copy.deepcopy(games)
    restored = FrameReplayBuffer(80, SHAPE, batch_size=8, seed=99, final_obs=True, horizon=16, n_step=3)
    restored.load_state_dict(buffer.state_dict())
    insert_all(buffer, steps_of(games, 40, seed=4))
    insert_all(restored, steps_of(twin, 40, seed=4))
    assert_same(restored.transitions(), buffer.transitions())
    assert_same(restored.sample(), buffer.sample())


def _td(batch: PrioritizedBatch) -> torch.Tensor:
    """TD errors a learner might send: a function of what was sampled, so twins get the same."""
    return batch.rewards * 3.0 + batch.obs.float().mean(dim=(-1, -2, -3)) / 50.0


def test_prioritized_frames_sample_as_the_whole_observation_replay_does_until_it_wraps() -> None:
    options = dict(batch_size=16, num_batches=2, seed=5, final_obs=True, alpha=0.7, beta=0.5, beta_steps=200)
    frames = PrioritizedFrameReplayBuffer(400, SHAPE, n_step=3, **options)
    plain = PrioritizedReplayBuffer(400, SHAPE, obs_dtype=torch.uint8, n_step=3, **options)
    steps = steps_of(Games(2, seed=6), 120, seed=6)
    for k in range(40):
        insert_all(frames, steps[3 * k : 3 * k + 3])
        insert_all(plain, steps[3 * k : 3 * k + 3])
        a, b = frames.sample(), plain.sample()
        assert isinstance(a, PrioritizedBatch) and a.rewards.shape == (16, 2)
        assert_same(a, b)
        frames.update_priorities(_td(a))
        plain.update_priorities(_td(b))


def test_prioritized_frames_sample_only_live_transitions_as_inserted() -> None:
    """With too few frames for its capacity the buffer drops its oldest transitions; their rows
    leave the sum tree, so every draw is a live transition, exactly as it went in."""
    games = Games(3, seed=0)
    buffer = PrioritizedFrameReplayBuffer(60, SHAPE, batch_size=64, final_obs=True, horizon=24, frames=64, alpha=1.0)
    record: list = []
    for _ in range(40):
        fill(buffer, games, 5, record)
        batch = buffer.sample()
        assert_matches(batch, record)
        live = set(buffer.transitions().rewards.long().tolist())
        assert set(batch.rewards.reshape(-1).long().tolist()) <= live
        buffer.update_priorities(torch.rand(batch.rewards.shape) + 0.5)
        dead = np.setdiff1d(np.arange(buffer.capacity), buffer._state_rows().numpy())
        assert not buffer.tree.values(dead).any()
    assert len(buffer) < buffer.capacity  # transitions were dropped for their frames


def test_a_prioritized_frames_checkpoint_restores_each_transitions_priority() -> None:
    games = Games(2, seed=8)
    options = dict(batch_size=32, final_obs=True, horizon=16, alpha=0.6, beta=0.4, beta_steps=1000)
    buffer = PrioritizedFrameReplayBuffer(50, SHAPE, seed=1, **options)
    for _ in range(12):  # past several wraps, so the live rows are not the first rows
        fill(buffer, games, 10, [])
        buffer.update_priorities(_td(buffer.sample()))
    restored = PrioritizedFrameReplayBuffer(50, SHAPE, seed=2, **options)
    restored.load_state_dict(buffer.state_dict())
    assert restored.tree.total == pytest.approx(buffer.tree.total)
    assert_same(restored.sample(), buffer.sample())


def test_a_frame_transition_enters_at_the_actors_td_error() -> None:
    """Ape-X's actors send each step's Q-value and next value; a one-step transition's priority is
    ``|r + gamma (1 - terminated) V(s') - Q(s, a)| + epsilon`` to the alpha."""
    games = Games(2, seed=9)
    games.left[:] = 10**6
    buffer = PrioritizedFrameReplayBuffer(16, SHAPE, final_obs=True, alpha=1.0, epsilon=0.0, gamma=0.5)
    obs, last, terminated, truncated, _ = games.step()
    q, value = torch.tensor([1.0, 2.0]), torch.tensor([4.0, -2.0])
    buffer.insert(obs, np.zeros(2, np.int64), np.array([1.0, 0.5], np.float32), last, terminated, truncated, q, value)
    # 1 + 0.5 x 4 - 1 = 2; 0.5 + 0.5 x -2 - 2 = -2.5
    np.testing.assert_allclose(buffer.tree.values([0, 1]), [2.0, 2.5])


@pytest.mark.parametrize("saved, loaded", [(1, 3), (3, 1)])
def test_a_checkpoint_of_other_n_step_settings_loads_and_goes_on(saved: int, loaded: int) -> None:
    """The transitions come back whatever ``n_step`` wrote them; each game's stacks are then shared
    afresh, and what is inserted after is stored exactly as its own windows make it."""
    games = Games(2, seed=10)
    buffer = FrameReplayBuffer(80, SHAPE, batch_size=8, final_obs=True, horizon=16, n_step=saved)
    insert_all(buffer, steps_of(games, 30, seed=10))
    restored = FrameReplayBuffer(80, SHAPE, batch_size=8, final_obs=True, horizon=16, n_step=loaded)
    restored.load_state_dict(buffer.state_dict())
    assert_same(restored.transitions(), buffer.transitions())
    before = len(restored)
    reference = FrameReplayBuffer(80, SHAPE, batch_size=8, final_obs=True, horizon=16, n_step=loaded)
    steps = steps_of(games, 12, seed=11)
    insert_all(restored, steps)
    insert_all(reference, steps)
    new = len(reference)
    assert 0 < new <= len(restored) <= before + new  # the oldest may go for their frames
    for x, y in zip(restored.transitions(), reference.transitions()):
        torch.testing.assert_close(x[-new:], y, rtol=0, atol=0)


def _ids(buffer: FrameReplayBuffer) -> list[int]:
    return buffer.transitions().rewards.long().tolist()


def test_fewer_frame_replicas_take_the_transitions_and_frames_of_those_they_replace() -> None:
    """Two replicas' replays into one: every transition of both, oldest first, each frame for frame
    as it went in; the new ring then goes on storing, sharing and sampling what goes in."""
    old, records = [], []
    for i in range(2):
        buffer = PrioritizedFrameReplayBuffer(40, SHAPE, batch_size=16, final_obs=True, horizon=16, seed=i)
        record: list = [None] * (1000 * i)  # replica i's ids from 1000 i on
        fill(buffer, Games(2, seed=20 + i), 30, record)
        old.append(buffer)
        records.append(record)
    new = PrioritizedFrameReplayBuffer(80, SHAPE, batch_size=16, final_obs=True, horizon=16, seed=5)
    new.load_regrouped([buffer.state_dict() for buffer in old], 0, 1)
    assert sorted(_ids(new)) == sorted(_ids(old[0]) + _ids(old[1]))
    for i in range(2):
        mine = [k for k, id_ in enumerate(_ids(new)) if id_ // 1000 == i]
        held = new.transitions()
        assert_matches(type(held)(*(field[mine] for field in held)), records[i])
    assert new.tree.total == pytest.approx(len(new))  # every transition at the largest priority, 1
    record = [None] * 5000
    fill(new, Games(2, seed=22), 60, record)  # it goes on: the newest are what went in since
    newest = [k for k, id_ in enumerate(_ids(new)) if id_ >= 5000]
    held = new.transitions()
    assert len(newest) > 0 and new.frames_per_transition < 1.6
    assert_matches(type(held)(*(field[newest] for field in held)), record)


def test_more_frame_replicas_share_each_old_ones_transitions_alternately() -> None:
    old = FrameReplayBuffer(60, SHAPE, batch_size=8, final_obs=True, horizon=16)
    record: list = []
    fill(old, Games(2, seed=30), 20, record)
    state = old.state_dict()
    new = [FrameReplayBuffer(60, SHAPE, batch_size=8, final_obs=True, horizon=16, seed=j) for j in range(2)]
    for j, buffer in enumerate(new):
        buffer.load_regrouped([state], j, 2)
        assert_matches(buffer.transitions(), record)
        assert_matches(buffer.sample(), record)
    ids = _ids(old)
    # the newest transition to replica 0, the one before to replica 1, and so on back
    assert _ids(new[0]) == ids[(len(ids) - 1) % 2 :: 2] and _ids(new[1]) == ids[len(ids) % 2 :: 2]


def test_a_frame_replica_with_fewer_frames_keeps_the_newest_transitions_that_fit() -> None:
    old = [FrameReplayBuffer(60, SHAPE, final_obs=True, horizon=16, seed=i) for i in range(2)]
    records: list = []
    for i, buffer in enumerate(old):
        record: list = [None] * (1000 * i)
        fill(buffer, Games(2, seed=40 + i), 30, record)
        records.append(record)
    small = FrameReplayBuffer(120, SHAPE, final_obs=True, horizon=16, frames=96)
    small.load_regrouped([buffer.state_dict() for buffer in old], 0, 1)
    assert 0 < len(small) < len(old[0]) + len(old[1])
    assert small.written <= small.num_frames - small.horizon
    for i in range(2):  # what is kept of each old replica is its newest, frame for frame
        mine = [id_ for id_ in _ids(small) if id_ // 1000 == i]
        assert mine == _ids(old[i])[len(_ids(old[i])) - len(mine) :]
        held = small.transitions()
        rows = [k for k, id_ in enumerate(_ids(small)) if id_ // 1000 == i]
        assert_matches(type(held)(*(field[rows] for field in held)), records[i])
