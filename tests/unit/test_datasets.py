"""Datasets in Minari's format (``msrl.data``): what msrl writes reads back unchanged through h5py and
through Minari's own reader, Minari's parser takes its spaces, a bad dataset (truncated, altered,
mismatched, non-finite) is one ``DatasetError`` and nothing is left half written, merged
datasets hold their sources' episodes in order (and only datasets of one environment merge), and
``DatasetReplay``'s copies hold whole strata of the episodes and draw together what one copy draws
(also across a regrouping), keep time-limited transitions bootstrapped, and checkpoint which
dataset they read rather than the data."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from msrl.core import Box, ConfigError, DatasetError, Discrete
from msrl.data import (
    DatasetReplay,
    Episode,
    merge_datasets,
    observation_statistics,
    read_episodes,
    read_info,
    space_from_json,
    space_to_json,
    write_dataset,
)

OBS = Box(np.array([-1.0, -1.0, -8.0], dtype=np.float32), np.array([1.0, 1.0, 8.0], dtype=np.float32), (3,))
ACTION = Box(-2.0, 2.0, (1,))
MINARI = importlib.util.find_spec("minari") is not None


def _episodes(count: int = 6, seed: int = 0) -> list[Episode]:
    """Episodes of 5 to 5 + count - 1 steps; odd ones terminate, even ones are cut by a time limit."""
    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(count):
        steps = 5 + i
        end = np.zeros(steps, dtype=bool)
        end[-1] = True
        episodes.append(
            Episode(
                observations=rng.uniform(-1, 1, (steps + 1, 3)).astype(np.float32),
                actions=rng.uniform(-2, 2, (steps, 1)).astype(np.float32),
                rewards=rng.normal(size=steps),
                terminations=end if i % 2 else np.zeros(steps, dtype=bool),
                truncations=np.zeros(steps, dtype=bool) if i % 2 else end,
                seed=i,
            )
        )
    return episodes


def _write(tmp_path: Path, episodes: list[Episode] | None = None, name: str = "ds") -> Path:
    out = tmp_path / name
    write_dataset(out, episodes or _episodes(), OBS, ACTION, "test/pendulum-v0", "Pendulum-v1")
    return out


NEEDS_MINARI = pytest.mark.skipif(not MINARI, reason="minari is not installed")


@pytest.mark.parametrize("reader", ["h5py", pytest.param("minari", marks=NEEDS_MINARI)])
def test_episodes_read_back_unchanged(tmp_path: Path, reader: str) -> None:
    written = _episodes()
    out = _write(tmp_path, written)
    read = read_episodes(out, reader=reader)
    assert len(read) == len(written)
    for ours, theirs in zip(read, written):
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(ours, field), getattr(theirs, field))
    info = read_info(out)
    assert (info.total_episodes, info.total_steps) == (6, sum(e.steps for e in written))
    assert (info.observation_space, info.action_space, info.env_id) == (OBS, ACTION, "Pendulum-v1")


@NEEDS_MINARI
def test_minari_reads_the_folder_as_one_of_its_datasets(tmp_path: Path) -> None:
    from minari import MinariDataset

    out = _write(tmp_path)
    dataset = MinariDataset(out / "data")
    assert (dataset.total_episodes, dataset.total_steps) == (6, sum(e.steps for e in _episodes()))
    assert dataset.observation_space.shape == (3,) and dataset.action_space.shape == (1,)
    np.testing.assert_array_equal(dataset.observation_space.high, OBS.high)
    episode = next(dataset.iterate_episodes(episode_indices=[3]))
    np.testing.assert_array_equal(episode.actions, _episodes()[3].actions)


@pytest.mark.parametrize("space", [Discrete(4), OBS, ACTION, Box(0, 255, (4, 84, 84), "uint8")])
def test_spaces_round_trip_through_minaris_json(space: Box | Discrete) -> None:
    assert space_from_json(space_to_json(space), "space") == space
    if MINARI:
        from minari.serialization import deserialize_space

        theirs = deserialize_space(space_to_json(space))
        assert theirs.shape == (() if isinstance(space, Discrete) else space.shape)


def test_a_space_msrl_does_not_read_is_named() -> None:
    with pytest.raises(DatasetError, match="MultiBinary space; msrl reads Box and Discrete"):
        space_from_json(json.dumps({"type": "MultiBinary", "n": 3}), "action_space")


def test_a_truncated_file_is_one_dataset_error(tmp_path: Path) -> None:
    out = _write(tmp_path)
    main = out / "data" / "main_data.hdf5"
    main.write_bytes(main.read_bytes()[: main.stat().st_size // 3])
    with pytest.raises(DatasetError, match="main_data.hdf5 cannot be read"):
        read_episodes(out, reader="h5py")


def test_missing_metadata_and_missing_folder_are_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such folder"):
        read_info(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no data/metadata.json"):
        read_info(tmp_path / "empty")
    out = _write(tmp_path)
    meta = json.loads((out / "data" / "metadata.json").read_text())
    del meta["action_space"]
    (out / "data" / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="lacks action_space"):
        read_info(out)


def test_metadata_that_disagrees_with_the_episodes_is_refused(tmp_path: Path) -> None:
    out = _write(tmp_path)
    meta = json.loads((out / "data" / "metadata.json").read_text())
    meta["total_steps"] += 1
    (out / "data" / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="metadata says"):
        read_episodes(out, reader="h5py")


def test_non_finite_or_misshapen_episodes_are_not_written(tmp_path: Path) -> None:
    bad = _episodes()
    bad[2].observations[1, 0] = np.nan
    with pytest.raises(DatasetError, match="episode 2: observations hold NaN"):
        _write(tmp_path, bad)
    short = _episodes()
    short[1].observations = short[1].observations[:-1]  # no last observation
    with pytest.raises(DatasetError, match="episode 1: observations of shape"):
        _write(tmp_path, short)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its scratch copy is left


def test_an_existing_folder_is_never_written_over(tmp_path: Path) -> None:
    out = _write(tmp_path)
    before = (out / "data" / "main_data.hdf5").read_bytes()
    with pytest.raises(DatasetError, match="exists"):
        _write(tmp_path)
    assert (out / "data" / "main_data.hdf5").read_bytes() == before


def test_a_merged_dataset_holds_its_sources_episodes_in_order(tmp_path: Path) -> None:
    first, second = _episodes(3, seed=1), _episodes(4, seed=2)
    merged = merge_datasets([_write(tmp_path, first, "a"), _write(tmp_path, second, "b")], tmp_path / "ab")
    assert (merged.total_episodes, merged.total_steps) == (7, sum(e.steps for e in first + second))
    assert merged.env_id == "Pendulum-v1" and merged.dataset_id == "msrl/ab-v0"
    assert [s["episodes"] for s in merged.metadata["msrl_merged_from"]] == [3, 4]
    for ours, theirs in zip(read_episodes(tmp_path / "ab", reader="h5py"), first + second, strict=True):
        np.testing.assert_array_equal(ours.observations, theirs.observations)
        np.testing.assert_array_equal(ours.actions, theirs.actions)
        np.testing.assert_array_equal(ours.terminations, theirs.terminations)
        np.testing.assert_array_equal(ours.truncations, theirs.truncations)


def test_datasets_of_different_environments_or_spaces_do_not_merge(tmp_path: Path) -> None:
    a = _write(tmp_path, name="a")
    other_env = tmp_path / "b"
    write_dataset(other_env, _episodes(), OBS, ACTION, "test/other-v0", "MountainCarContinuous-v0")
    with pytest.raises(DatasetError, match="differ in their environment"):
        merge_datasets([a, other_env], tmp_path / "out")
    wider = Box(-3.0, 3.0, (1,))
    other_space = tmp_path / "c"
    write_dataset(other_space, _episodes(), OBS, wider, "test/wide-v0", "Pendulum-v1")
    with pytest.raises(DatasetError, match="differ in their action space"):
        merge_datasets([a, other_space], tmp_path / "out")
    with pytest.raises(DatasetError, match="two datasets or more"):
        merge_datasets([a], tmp_path / "out")
    with pytest.raises(DatasetError, match="exists"):
        merge_datasets([a, a], other_space)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]  # no scratch folder left


def test_copies_of_the_replay_hold_whole_strata_and_draw_what_one_copy_draws(tmp_path: Path) -> None:
    out = _write(tmp_path)
    seeds = [11, 12]
    whole = DatasetReplay(out, seeds, batch_size=4, num_batches=3)
    parts = [DatasetReplay(out, seeds, batch_size=2, num_batches=3, part=(i, 2)) for i in range(2)]
    assert [p.episodes for p in parts] == [(0, 3), (3, 6)]
    assert sum(len(p) for p in parts) == len(whole) == read_info(out).total_steps
    held = torch.cat([p.obs[: len(p)] for p in parts])
    torch.testing.assert_close(held, whole.obs[: len(whole)])
    assert whole.steps_per_sample == 12 and parts[0].steps_per_sample == 6
    for _ in range(3):  # the copies' batches side by side are the one copy's, draw after draw
        batch, pieces = whole.sample(), [p.sample() for p in parts]
        assert batch.obs.shape == (4, 3, 3) and batch.actions.shape == (4, 3, 1)
        for field, *halves in zip(batch, *pieces):
            torch.testing.assert_close(field, torch.cat(halves))


def test_a_regrouped_replay_draws_on_as_the_copies_would_have(tmp_path: Path) -> None:
    out = _write(tmp_path)
    seeds = [3, 4, 5]
    whole = DatasetReplay(out, seeds, batch_size=6)
    parts = [DatasetReplay(out, seeds, batch_size=2, part=(i, 3)) for i in range(3)]
    whole.sample()
    for part in parts:
        part.sample()
    regrouped = DatasetReplay(out, seeds, batch_size=6)
    regrouped.load_regrouped([p.state_dict() for p in parts], 0, 1)
    torch.testing.assert_close(regrouped.sample().obs, whole.sample().obs)


def test_strata_that_do_not_fit_are_one_line(tmp_path: Path) -> None:
    out = _write(tmp_path, _episodes(2))
    with pytest.raises(DatasetError, match="2 episodes cannot be cut into 3 strata"):
        DatasetReplay(out, [0, 1, 2], batch_size=3)
    with pytest.raises(ConfigError, match="4 strata .* which 3 copies"):
        DatasetReplay(out, [0, 1, 2, 3], part=(0, 3))
    with pytest.raises(ConfigError, match="a batch share of 5 cannot be drawn equally from 2 strata"):
        DatasetReplay(out, [0, 1], batch_size=5)


def test_time_limited_transitions_bootstrap_from_the_episodes_last_observation(tmp_path: Path) -> None:
    episodes = _episodes(2)
    out = _write(tmp_path, episodes)
    replay = DatasetReplay(out)
    first = episodes[0]  # cut by the time limit after 5 steps
    last = first.steps - 1
    torch.testing.assert_close(replay.next_obs[last], torch.as_tensor(first.observations[-1]))
    assert replay.terminated[last] == 0.0
    second_end = first.steps + episodes[1].steps - 1  # terminated
    assert replay.terminated[second_end] == 1.0
    assert replay.terminated.sum() == 1.0


def test_observations_standardise_by_the_whole_datasets_statistics_in_every_copy(tmp_path: Path) -> None:
    """The statistics are the transitions' observations' (each episode's last observation follows
    a transition, it starts none), plus 1e-3 on the deviation; both halves of a split replay
    standardise by the whole dataset's, so their rows are the whole replay's rows."""
    episodes = _episodes()
    out = _write(tmp_path, episodes)
    mean, std = observation_statistics(out)
    rows = np.concatenate([e.observations[:-1] for e in episodes]).astype(np.float64)
    np.testing.assert_allclose(mean, rows.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(std, rows.std(0) + 1e-3, rtol=1e-5, atol=1e-6)
    whole = DatasetReplay(out, [1, 2], obs_stats=(mean, std))
    raw = DatasetReplay(out, [1, 2])
    n = len(whole)
    torch.testing.assert_close(whole.obs[:n], (raw.obs[:n] - torch.as_tensor(mean)) / torch.as_tensor(std))
    torch.testing.assert_close(whole.next_obs[:n], (raw.next_obs[:n] - torch.as_tensor(mean)) / torch.as_tensor(std))
    torch.testing.assert_close(whole.obs[:n].mean(0), torch.zeros(3), rtol=0, atol=1e-5)
    parts = [DatasetReplay(out, [1, 2], batch_size=128, part=(i, 2), obs_stats=(mean, std)) for i in range(2)]
    torch.testing.assert_close(torch.cat([p.obs[: len(p)] for p in parts]), whole.obs[:n])


def test_a_checkpoint_holds_the_random_streams_not_the_data(tmp_path: Path) -> None:
    out = _write(tmp_path)
    replay = DatasetReplay(out, [3, 4], batch_size=8)
    state = replay.state_dict()
    assert set(state) == {"strata", "dataset"}
    first = replay.sample()
    again = DatasetReplay(out, [98, 99], batch_size=8)
    again.load_state_dict(state)
    torch.testing.assert_close(again.sample().obs, first.obs)
    other = _write(tmp_path, _episodes(4, seed=1), name="other")
    with pytest.raises(ValueError, match="the checkpoint trained on dataset"):
        DatasetReplay(other, [3, 4]).load_state_dict(state)
