"""The episode tracker keeps its finished-episode totals lazily (returns as the
difference of a cumulative total at an episode's end and start, lengths as a
gross count minus the running lengths).  These tests drive
the one tracker on every array backend (NumPy; torch finding finished
environments by index, as on the CPU, and by mask, as on an accelerator)
through random steps, finishes, discards, metrics and checkpoints, next to a
plain count of every finished episode, and require the same numbers."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from msrl.core import ConfigError
from msrl.envs import EpisodeTracker, NumpyArrays, TorchArrays

NUM_ENVS = 16
BACKENDS = {
    "numpy": NumpyArrays,
    "torch-indices": lambda: TorchArrays("cpu", sparse=True),
    "torch-masks": lambda: TorchArrays("cpu", sparse=False),
}


class DirectCount:
    """What the tracker must report: every finished episode added up as it ends."""

    def __init__(self, n: int) -> None:
        self.returns, self.lengths, self.finished = np.zeros(n), np.zeros(n, np.int64), []

    def step(self, reward: np.ndarray, done: np.ndarray) -> None:
        self.returns += reward
        self.lengths += 1
        self.finished += list(zip(self.returns[done], self.lengths[done]))
        self.discard(done)

    def discard(self, mask: np.ndarray | None = None) -> None:
        mask = slice(None) if mask is None else mask
        self.returns[mask], self.lengths[mask] = 0.0, 0

    def metrics(self) -> dict[str, float]:
        finished, self.finished = self.finished, []
        if not finished:
            return {}
        return {
            "episode_return": float(np.mean([r for r, _ in finished])),
            "episode_length": float(np.mean([n for _, n in finished])),
            "episodes": len(finished),
        }


def _same(a: dict[str, float], b: dict[str, float]) -> None:
    assert a.keys() == b.keys()
    if a:
        assert a["episodes"] == b["episodes"]
        assert a["episode_length"] == b["episode_length"]
        assert a["episode_return"] == pytest.approx(b["episode_return"], rel=1e-12)


def _roundtrip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lazy_totals_match_direct_sums(backend: str, seed: int):
    rng = np.random.default_rng(seed)
    arrays = BACKENDS[backend]()
    ref, lazy = DirectCount(NUM_ENVS), EpisodeTracker(arrays, NUM_ENVS)
    checked = restored = 0
    for _ in range(400):
        reward = rng.normal(size=NUM_ENVS).astype(np.float32)
        done = rng.random(NUM_ENVS) < 0.1
        ref.step(reward, done)
        terminated = arrays.asarray(done.astype(np.float32))
        lazy.record(
            arrays.asarray(reward), arrays.finished_rows(terminated, arrays.asarray(np.zeros(NUM_ENVS, np.float32)))
        )
        roll = rng.random()
        if roll < 0.05:  # set_state/reset: running episodes dropped without being counted
            mask = rng.random(NUM_ENVS) < 0.5
            ref.discard(mask)
            lazy.discard(arrays.asarray(mask))
        elif roll < 0.07:
            ref.discard()
            lazy.discard()
        elif roll < 0.17:
            _same(lazy.metrics(), ref.metrics())
            checked += 1
        elif roll < 0.22:  # a checkpoint in the middle of a metrics window resumes the same totals
            fresh = EpisodeTracker(arrays, NUM_ENVS)
            fresh.load_state_dict(_roundtrip(lazy.state_dict()))
            lazy, restored = fresh, restored + 1
        np.testing.assert_array_equal(np.asarray(lazy.lengths), ref.lengths)
        np.testing.assert_allclose(np.asarray(lazy.returns), ref.returns, rtol=1e-12, atol=1e-12)
    _same(lazy.metrics(), ref.metrics())
    assert checked > 10 and restored > 5


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_resumed_metrics_equal_the_uninterrupted_ones_to_the_last_bit(backend: str):
    rng = np.random.default_rng(7)
    arrays = BACKENDS[backend]()
    a = EpisodeTracker(arrays, NUM_ENVS)
    rewards = rng.normal(size=(300, NUM_ENVS)).astype(np.float32) * 1e3
    dones = rng.random((300, NUM_ENVS)) < 0.05
    zeros = arrays.asarray(np.zeros(NUM_ENVS, np.float32))

    def run(tracker: EpisodeTracker, steps: range) -> None:
        for t in steps:
            tracker.record(
                arrays.asarray(rewards[t]), arrays.finished_rows(arrays.asarray(dones[t].astype(np.float32)), zeros)
            )

    run(a, range(150))
    b = EpisodeTracker(arrays, NUM_ENVS)
    b.load_state_dict(_roundtrip(a.state_dict()))
    run(a, range(150, 300))
    run(b, range(150, 300))
    ma, mb = a.metrics(), b.metrics()
    assert ma == mb and ma["episodes"] > 100


def test_adopted_running_values_are_not_counted_as_finished():
    """A rollout kernel that counted its own steps hands them over as running episodes."""
    arrays = TorchArrays("cpu", sparse=False)
    lazy = EpisodeTracker(arrays, 4)
    lazy.record(torch.ones(4), None)
    lazy.discard()
    lazy.adopt_running(torch.tensor([3, 0, 5, 1]), torch.tensor([3, 0, 5, 1]))
    assert lazy.metrics() == {}
    lazy.record(torch.ones(4), torch.tensor([True, False, True, False]))
    assert lazy.metrics() == {"episode_return": 5.0, "episode_length": 5.0, "episodes": 2}


def test_state_dict_is_the_same_on_every_backend():
    """One layout, tensors and plain numbers: a checkpoint moves between backends."""
    states = []
    for make_arrays in BACKENDS.values():
        arrays = make_arrays()
        tracker = EpisodeTracker(arrays, 3)
        tracker.record(
            arrays.asarray(np.array([1.0, 2.0, 3.0], np.float32)),
            arrays.finished_rows(
                arrays.asarray(np.array([0, 1, 0], np.float32)), arrays.asarray(np.zeros(3, np.float32))
            ),
        )
        states.append(tracker.state_dict())
    for state in states:
        assert state.keys() == states[0].keys()
        assert (state["gross_length"], state["finished_count"]) == (3, 1)
        torch.testing.assert_close(
            state["return_total"] - state["return_start"], torch.tensor([1.0, 0.0, 3.0], dtype=torch.float64)
        )
        assert state["running_length"].tolist() == [1, 0, 1]
    moved = EpisodeTracker(NumpyArrays(), 3)
    moved.load_state_dict(states[1])  # written by torch, read by NumPy
    assert moved.metrics() == {"episode_return": 2.0, "episode_length": 1.0, "episodes": 1}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_group_episodes_are_the_per_group_and_overall_means(backend: str):
    """``GroupEpisodes`` (the one tracker of MultiAgentEnv and the PettingZoo adapter): an
    episode's group return is the sum over its steps of the group's mean reward, the overall
    return that of the mean over all agents; a checkpoint keeps both exactly."""
    from msrl import CheckpointError
    from msrl.envs import GroupEpisodes

    arrays = BACKENDS[backend]()
    sizes = {"taggers": 2, "runners": 3}
    episodes = GroupEpisodes(arrays, NUM_ENVS, sizes)
    direct = {name: DirectCount(NUM_ENVS) for name in (*sizes, "overall")}
    rng = np.random.default_rng(5)
    for _ in range(40):
        rewards = {name: rng.normal(size=(NUM_ENVS, n)).astype(np.float32) for name, n in sizes.items()}
        done = rng.random(NUM_ENVS) < 0.2
        flags = arrays.asarray(done.astype(np.float32))
        episodes.record({k: arrays.asarray(v) for k, v in rewards.items()}, arrays.finished_rows(flags, flags * 0))
        for name, reward in rewards.items():
            direct[name].step(reward.sum(1) / sizes[name], done)
        direct["overall"].step((rewards["taggers"].sum(1) + rewards["runners"].sum(1)) / 5, done)
    metrics = episodes.metrics()
    for name in ("taggers", "runners", "overall"):
        key = "episode_return" if name == "overall" else f"episode_return/{name}"
        expected = np.mean([r for r, _ in direct[name].finished])
        assert metrics[key] == pytest.approx(expected, rel=1e-6), name
    assert metrics["episodes"] == len(direct["overall"].finished)
    assert episodes.metrics() == {}  # a new window

    groups = episodes.group_state_dict()
    with pytest.raises(CheckpointError, match=r"Tag checkpoint lacks the episodes of groups \['runners', 'taggers'\]"):
        GroupEpisodes(arrays, NUM_ENVS, sizes).load_group_state_dict({"taggers": groups["taggers"]}, "Tag")
    restored = GroupEpisodes(arrays, NUM_ENVS, sizes)
    restored.overall.load_state_dict(episodes.overall.state_dict())
    restored.load_group_state_dict(groups, "Tag")
    flags = arrays.asarray(np.ones(NUM_ENVS, np.float32))
    ones = {name: arrays.asarray(np.ones((NUM_ENVS, n), np.float32)) for name, n in sizes.items()}
    for tracker in (episodes, restored):
        tracker.record(ones, arrays.finished_rows(flags, flags * 0))
    assert episodes.metrics() == restored.metrics()


def _like_a_step_kernel(reward, done):
    """``record_by``'s launch as a step kernel does it (``msrl_episodes.cuh``), in array operations."""

    def launch(total, start, lengths, finished) -> None:
        total += reward
        start[done] = total[done]
        lengths += 1
        lengths[done] = 0
        finished[done] += 1

    return launch


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_recorded_by_a_kernel_the_totals_are_those_of_record(backend: str):
    """Per-environment finished counts folded in by metrics() and state_dict() give ``record``'s
    numbers exactly, through discards and checkpoints that move between the two ways."""
    rng = np.random.default_rng(4)
    arrays = BACKENDS[backend]()
    host, kernel = EpisodeTracker(arrays, NUM_ENVS), EpisodeTracker(arrays, NUM_ENVS, counts_per_env=True)
    zeros = arrays.asarray(np.zeros(NUM_ENVS, np.float32))
    for t in range(300):
        reward, done = rng.normal(size=NUM_ENVS).astype(np.float32), rng.random(NUM_ENVS) < 0.1
        host.record(arrays.asarray(reward), arrays.finished_rows(arrays.asarray(done.astype(np.float32)), zeros))
        kernel.record_by(_like_a_step_kernel(arrays.asarray(reward), arrays.asarray(done)))
        if t % 50 == 10:
            mask = arrays.asarray(rng.random(NUM_ENVS) < 0.5)
            host.discard(mask)
            kernel.discard(mask)
        if t % 30 == 29:
            assert kernel.metrics() == host.metrics()
        if t % 70 == 69:
            a, b = host.state_dict(), kernel.state_dict()
            assert a.keys() == b.keys() and all(
                torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
            )
            host.load_state_dict(_roundtrip(b))
            kernel.load_state_dict(_roundtrip(a))
    assert kernel.metrics() == host.metrics()
    with pytest.raises(ConfigError, match="counts_per_env=True"):
        host.record_by(_like_a_step_kernel(zeros, zeros > 0))
