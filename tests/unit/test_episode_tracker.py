"""The torch episode tracker keeps its finished-episode totals lazily (rewards
since the last ``metrics`` plus the running returns then, minus the running
returns now).  These tests drive it through random steps, finishes, discards,
metrics and checkpoints next to the NumPy tracker, which adds up every finished
episode directly, and require the same numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from msrl.envs._episodes import EpisodeTracker, TorchEpisodeTracker

NUM_ENVS = 16


def _same(a: dict[str, float], b: dict[str, float]) -> None:
    assert a.keys() == b.keys()
    if a:
        assert a["episodes"] == b["episodes"]
        assert a["episode_length"] == b["episode_length"]
        assert a["episode_return"] == pytest.approx(b["episode_return"], rel=1e-12)


@pytest.mark.parametrize("by_index", [False, True], ids=["finish-mask", "finish-at-indices"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lazy_totals_match_direct_sums(by_index: bool, seed: int):
    rng = np.random.default_rng(seed)
    ref, lazy = EpisodeTracker(NUM_ENVS), TorchEpisodeTracker(NUM_ENVS, torch.device("cpu"))
    checked = 0
    for _ in range(400):
        reward = rng.normal(size=NUM_ENVS).astype(np.float32)
        ref.add(reward)
        lazy.add(torch.from_numpy(reward))
        done = rng.random(NUM_ENVS) < 0.1
        if done.any():
            ref.finish(done)
        if by_index:
            lazy.finish_at(torch.from_numpy(np.flatnonzero(done)))
        else:
            lazy.finish(torch.from_numpy(done))
        roll = rng.random()
        if roll < 0.05:  # set_state/reset: running episodes dropped without being counted
            mask = rng.random(NUM_ENVS) < 0.5
            ref.discard(mask)
            lazy.discard(torch.from_numpy(mask))
        elif roll < 0.07:
            ref.discard()
            lazy.discard()
        elif roll < 0.17:
            _same(lazy.metrics(), ref.metrics())
            checked += 1
        elif roll < 0.22:  # a checkpoint in the middle of a metrics window resumes the same totals
            restored = TorchEpisodeTracker(NUM_ENVS, torch.device("cpu"))
            restored.load_state_dict(lazy.state_dict())
            lazy = restored
        np.testing.assert_array_equal(lazy.lengths.numpy(), ref.lengths)
        np.testing.assert_allclose(lazy.returns.numpy(), ref.returns, rtol=1e-12, atol=1e-12)
    _same(lazy.metrics(), ref.metrics())
    assert checked > 10


def test_adopted_running_values_are_not_counted_as_finished():
    """A rollout kernel that counted its own steps hands them over as running episodes."""
    lazy = TorchEpisodeTracker(4, torch.device("cpu"))
    lazy.add(torch.ones(4))
    lazy.discard()
    lazy.adopt_running(torch.tensor([3, 0, 5, 1], dtype=torch.int32), torch.tensor([3, 0, 5, 1], dtype=torch.int32))
    assert lazy.metrics() == {}
    lazy.add(torch.ones(4))
    lazy.finish(torch.tensor([True, False, True, False]))
    assert lazy.metrics() == {"episode_return": 5.0, "episode_length": 5.0, "episodes": 2}


def test_state_dict_has_the_numpy_trackers_layout():
    """Checkpoints move between backends: the same keys and the totals finished so far."""
    lazy, ref = TorchEpisodeTracker(3, torch.device("cpu")), EpisodeTracker(3)
    for tracker, to in ((lazy, torch.tensor), (ref, np.array)):
        tracker.add(to([1.0, 2.0, 3.0], dtype=torch.float32 if to is torch.tensor else np.float32))
    lazy.finish(torch.tensor([False, True, False]))
    ref.finish(np.array([False, True, False]))
    a, b = lazy.state_dict(), ref.state_dict()
    assert a.keys() == b.keys()
    assert (a["finished_return"], a["finished_length"], a["finished_count"]) == (2.0, 1, 1)
    assert (b["finished_return"], b["finished_length"], b["finished_count"]) == (2.0, 1, 1)
    torch.testing.assert_close(a["running_return"], b["running_return"])
