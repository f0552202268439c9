"""Recorded episodes on disk in Minari's format (its ``hdf5`` storage), written and read with h5py.

A dataset is a folder holding ``data/``, as Minari keeps one under its datasets root::

    DIR/data/metadata.json    dataset_id, total_episodes, total_steps, data_format ("hdf5"),
                              observation_space and action_space (Minari's JSON of a space),
                              minari_version (the format's version), msrl's own keys
                              (msrl_env_id, msrl_env_kwargs, and what made it)
    DIR/data/main_data.hdf5   a group ``episode_{i}`` per episode: observations (T+1, ...),
                              actions (T, ...), rewards (T,), terminations (T,), truncations
                              (T,), an ``infos`` group; attributes id, total_steps, seed

``minari.MinariDataset("DIR/data")`` reads such a folder, and Minari's own datasets (Box or
Discrete spaces, this storage) read here.  ``read_dataset`` uses Minari's reader where Minari is
installed and h5py's where it is not; both give the same arrays.  Everything wrong with a
dataset (no such folder, a truncated file, spaces that are not the environment's, non-finite
values) is a ``DatasetError``: one line, nothing written.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from msrl.core import Box, DatasetError, Discrete, Space

FORMAT_VERSION = "0.5.4"
"""The Minari version whose on-disk format msrl writes (Minari reads 0.4.0 to 0.5.x)."""
READABLE_VERSIONS = ("0.4.0", "0.4.1", "0.4.2", "0.4.3", "0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.5.4")
MAIN_FILE = "main_data.hdf5"
METADATA_FILE = "metadata.json"
_REQUIRED = ("dataset_id", "total_episodes", "total_steps", "data_format", "observation_space", "action_space")


@dataclass
class Episode:
    """One recorded episode: ``observations`` has one row more than the steps (the last
    observation, after the last action), the others one row per step."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    seed: int | None = None

    @property
    def steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def episode_return(self) -> float:
        return float(self.rewards.sum())


@dataclass
class DatasetInfo:
    """What ``metadata.json`` says: enough to size networks without reading the episodes."""

    path: Path
    dataset_id: str
    total_episodes: int
    total_steps: int
    observation_space: Space
    action_space: Space
    env_id: str | None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Transitions:
    """A dataset's steps as flat arrays, in episode order: ``next_obs[i]`` follows ``obs[i]``."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray

    def __len__(self) -> int:
        return int(self.rewards.shape[0])


# -- spaces as Minari writes them ----------------------------------------------------------------------------------
def space_to_json(space: Space) -> str:
    """Minari's JSON of a ``Box`` or ``Discrete`` space (``minari.serialization.serialize_space``'s)."""
    if isinstance(space, Discrete):
        return json.dumps({"type": "Discrete", "dtype": "int64", "start": 0, "n": int(space.n)})
    if isinstance(space, Box):
        shape = tuple(int(n) for n in space.shape)
        low = np.broadcast_to(np.asarray(space.low, dtype=np.dtype(space.dtype)), shape)
        high = np.broadcast_to(np.asarray(space.high, dtype=np.dtype(space.dtype)), shape)
        return json.dumps(
            {"type": "Box", "dtype": str(space.dtype), "shape": list(shape), "low": low.tolist(), "high": high.tolist()}
        )
    raise DatasetError(f"a dataset holds Box or Discrete spaces, not {type(space).__name__}")


def space_from_json(text: Any, what: str) -> Space:
    """The space Minari's JSON ``text`` describes; a ``DatasetError`` naming ``what`` where it is not
    a Box or a Discrete space starting at 0."""
    try:
        data = json.loads(text) if isinstance(text, str) else text
        kind = data["type"]
        if kind == "Discrete":
            if int(data.get("start", 0)) != 0:
                raise DatasetError(f"{what}: a Discrete space starting at {data['start']}, msrl's start at 0")
            return Discrete(int(data["n"]))
        if kind == "Box":
            shape = tuple(int(n) for n in data["shape"])
            dtype = str(np.dtype(data["dtype"]))
            low = np.asarray(data["low"], dtype=dtype).reshape(shape)
            high = np.asarray(data["high"], dtype=dtype).reshape(shape)
            return Box(low, high, shape, dtype)
    except DatasetError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise DatasetError(f"{what} is not a space Minari wrote: {str(exc)[:120]}") from None
    raise DatasetError(f"{what}: a {kind} space; msrl reads Box and Discrete spaces")


# -- writing --------------------------------------------------------------------------------------------------------
def write_dataset(
    path: str | os.PathLike[str],
    episodes: Iterable[Episode],
    observation_space: Space,
    action_space: Space,
    dataset_id: str,
    env_id: str | None,
    env_kwargs: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> DatasetInfo:
    """Write ``episodes`` as a dataset in folder ``path``, which must not exist yet: everything is
    written into a folder beside it first and moved into place whole, so an interrupted write
    leaves no dataset rather than part of one.  ``metadata`` adds keys to ``metadata.json``
    (``algorithm_name``, ``description``, msrl's own)."""
    import h5py

    target = Path(path)
    if target.exists():
        raise DatasetError(f"{target} exists; msrl writes a dataset into a new folder only (nothing was written)")
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        data = scratch / "data"
        data.mkdir()
        count = steps = 0
        with h5py.File(data / MAIN_FILE, "w", track_order=True) as file:
            for episode in episodes:
                _check_episode(episode, observation_space, action_space, f"episode {count}")
                group = file.create_group(f"episode_{count}")
                group.attrs["id"] = count
                group.attrs["total_steps"] = episode.steps
                if episode.seed is not None:
                    group.attrs["seed"] = int(episode.seed)
                group.create_dataset("observations", data=episode.observations)
                group.create_dataset("actions", data=episode.actions)
                group.create_dataset("rewards", data=episode.rewards)
                group.create_dataset("terminations", data=episode.terminations.astype(bool))
                group.create_dataset("truncations", data=episode.truncations.astype(bool))
                group.create_group("infos")
                count, steps = count + 1, steps + episode.steps
        if count == 0:
            raise DatasetError("no episodes to write")
        meta = {
            **(metadata or {}),
            "dataset_id": dataset_id,
            "total_episodes": count,
            "total_steps": steps,
            "data_format": "hdf5",
            "jpeg_encoding": False,
            "observation_space": space_to_json(observation_space),
            "action_space": space_to_json(action_space),
            "minari_version": FORMAT_VERSION,
            "msrl_env_id": env_id,
            "msrl_env_kwargs": env_kwargs or {},
        }
        meta["dataset_size"] = round((data / MAIN_FILE).stat().st_size / 2**20, 1)
        with open(data / METADATA_FILE, "w", encoding="utf-8") as handle:
            json.dump(meta, handle)
        os.replace(scratch, target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return read_info(target)


def merge_datasets(
    paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], dataset_id: str | None = None
) -> DatasetInfo:
    """Write the episodes of the datasets ``paths``, in that order, as one new dataset ``out``:
    D4RL's mixed levels (medium-expert is medium's episodes then expert's).  The datasets must hold
    the same environment (id and keywords) and spaces; each is read, checked and written in turn,
    so memory holds one source at a time.  Nothing is written where a source is bad."""
    if len(paths) < 2:
        raise DatasetError(f"merging needs two datasets or more, got {len(paths)}")
    infos = [read_info(path) for path in paths]
    first = infos[0]
    for info in infos[1:]:
        for what, ours, theirs in (
            ("environment", (first.env_id, first.env_kwargs), (info.env_id, info.env_kwargs)),
            ("observation space", space_to_json(first.observation_space), space_to_json(info.observation_space)),
            ("action space", space_to_json(first.action_space), space_to_json(info.action_space)),
        ):
            if ours != theirs:
                raise DatasetError(
                    f"{info.path} and {first.path} differ in their {what} ({theirs} vs {ours}); "
                    "merged datasets must share it (nothing was written)"
                )

    def episodes() -> Iterable[Episode]:
        for info in infos:
            yield from read_episodes(info.path)

    sources = [{"path": str(i.path), "dataset_id": i.dataset_id, "episodes": i.total_episodes} for i in infos]
    description = "; ".join(f"{s['episodes']} episodes of {s['dataset_id']}" for s in sources)
    return write_dataset(
        out,
        episodes(),
        first.observation_space,
        first.action_space,
        dataset_id or f"msrl/{Path(out).name}-v0",
        first.env_id,
        first.env_kwargs,
        {"description": f"merged: {description}", "msrl_merged_from": sources},
    )


# -- reading --------------------------------------------------------------------------------------------------------
def data_folder(path: str | os.PathLike[str]) -> Path:
    """The ``data`` folder of dataset ``path`` (the dataset's folder or its ``data`` itself)."""
    root = Path(path)
    if (root / "data" / METADATA_FILE).is_file():
        return root / "data"
    if (root / METADATA_FILE).is_file():
        return root
    if not root.exists():
        raise DatasetError(f"no dataset at {root}: no such folder")
    raise DatasetError(f"no dataset at {root}: no data/{METADATA_FILE} (msrl record writes one)")


def read_info(path: str | os.PathLike[str]) -> DatasetInfo:
    """The metadata of dataset ``path``, checked: the keys Minari needs, its spaces, an HDF5 file."""
    data = data_folder(path)
    try:
        with open(data / METADATA_FILE, encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{data / METADATA_FILE} cannot be read: {str(exc)[:120]}") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"{data / METADATA_FILE} is not a JSON object")
    missing = [key for key in _REQUIRED if key not in meta]
    if missing:
        raise DatasetError(f"{data / METADATA_FILE} lacks {', '.join(missing)}")
    if meta["data_format"] != "hdf5":
        raise DatasetError(f"{data}: data_format {meta['data_format']!r}; msrl reads Minari's 'hdf5' storage")
    if not (data / MAIN_FILE).is_file():
        raise DatasetError(f"{data}: no {MAIN_FILE}")
    try:
        episodes, steps = int(meta["total_episodes"]), int(meta["total_steps"])
    except (TypeError, ValueError):
        raise DatasetError(f"{data / METADATA_FILE}: total_episodes and total_steps must be integers") from None
    if episodes < 1 or steps < 1:
        raise DatasetError(f"{data}: an empty dataset ({episodes} episodes, {steps} steps)")
    kwargs = meta.get("msrl_env_kwargs") or {}
    return DatasetInfo(
        path=data.parent,
        dataset_id=str(meta["dataset_id"]),
        total_episodes=episodes,
        total_steps=steps,
        observation_space=space_from_json(meta["observation_space"], "observation_space"),
        action_space=space_from_json(meta["action_space"], "action_space"),
        env_id=meta.get("msrl_env_id"),
        env_kwargs=dict(kwargs) if isinstance(kwargs, dict) else {},
        metadata=meta,
    )


def read_episodes(
    path: str | os.PathLike[str], indices: Sequence[int] | None = None, reader: str = "auto"
) -> list[Episode]:
    """Episodes of dataset ``path`` (all, or those of ``indices``), checked against its spaces.
    ``reader``: ``minari`` (Minari's ``MinariDataset``), ``h5py``, or ``auto``: Minari's where it
    is installed."""
    info = read_info(path)
    chosen = list(range(info.total_episodes)) if indices is None else [int(i) for i in indices]
    bad = [i for i in chosen if not 0 <= i < info.total_episodes]
    if bad:
        raise DatasetError(f"{info.path}: no episode {bad[0]} (it holds {info.total_episodes})")
    if reader == "auto":
        reader = "minari" if _minari_installed() else "h5py"
    if reader not in ("minari", "h5py"):
        raise ValueError(f"reader must be 'minari', 'h5py' or 'auto', got {reader!r}")
    read = _read_minari if reader == "minari" else _read_h5py
    try:
        episodes = read(info, chosen)
    except DatasetError:
        raise
    except (OSError, KeyError, ValueError, TypeError, AssertionError) as exc:  # a truncated or altered file
        detail = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise DatasetError(f"{info.path / 'data' / MAIN_FILE} cannot be read: {detail}") from None
    for index, episode in zip(chosen, episodes):
        _check_episode(episode, info.observation_space, info.action_space, f"{info.path}: episode {index}")
    if indices is None and sum(e.steps for e in episodes) != info.total_steps:
        found = sum(e.steps for e in episodes)
        raise DatasetError(f"{info.path}: metadata says {info.total_steps} steps, its episodes hold {found}")
    return episodes


def transitions(episodes: Sequence[Episode], action_space: Space) -> Transitions:
    """The episodes' steps as flat arrays (observations float32, actions as a buffer keeps them)."""
    if not episodes:
        raise DatasetError("no episodes")
    action_dtype = np.float32 if isinstance(action_space, Box) else np.int64
    cat = lambda parts: np.concatenate(parts, axis=0)  # noqa: E731
    return Transitions(
        obs=cat([e.observations[:-1] for e in episodes]).astype(np.float32, copy=False),
        actions=cat([e.actions for e in episodes]).astype(action_dtype, copy=False),
        rewards=cat([e.rewards for e in episodes]).astype(np.float32, copy=False),
        next_obs=cat([e.observations[1:] for e in episodes]).astype(np.float32, copy=False),
        terminations=cat([e.terminations for e in episodes]).astype(np.float32),
        truncations=cat([e.truncations for e in episodes]).astype(np.float32),
    )


def _minari_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("minari") is not None


def _read_h5py(info: DatasetInfo, indices: list[int]) -> list[Episode]:
    import h5py

    episodes = []
    with h5py.File(info.path / "data" / MAIN_FILE, "r") as file:
        for index in indices:
            group = file[f"episode_{index}"]
            seed = group.attrs.get("seed")
            episodes.append(
                Episode(
                    observations=group["observations"][()],
                    actions=group["actions"][()],
                    rewards=group["rewards"][()],
                    terminations=group["terminations"][()],
                    truncations=group["truncations"][()],
                    seed=None if seed is None else int(seed),
                )
            )
    return episodes


def _read_minari(info: DatasetInfo, indices: list[int]) -> list[Episode]:
    from minari import MinariDataset

    version = info.metadata.get("minari_version")
    if version not in READABLE_VERSIONS:
        raise DatasetError(f"{info.path}: minari_version {version!r}; readable: {', '.join(READABLE_VERSIONS)}")
    dataset = MinariDataset(info.path / "data")
    episodes = []
    for episode in dataset.iterate_episodes(episode_indices=indices):
        episodes.append(
            Episode(
                observations=np.asarray(episode.observations),
                actions=np.asarray(episode.actions),
                rewards=np.asarray(episode.rewards),
                terminations=np.asarray(episode.terminations),
                truncations=np.asarray(episode.truncations),
            )
        )
    return episodes


def _check_episode(episode: Episode, observation_space: Space, action_space: Space, where: str) -> None:
    """A ``DatasetError`` naming ``where`` unless the episode's arrays fit the spaces and each other."""
    steps = int(np.shape(episode.rewards)[0]) if np.ndim(episode.rewards) == 1 else -1
    if steps < 1:
        raise DatasetError(f"{where}: rewards must be one value per step, got shape {np.shape(episode.rewards)}")
    obs_shape = tuple(observation_space.shape) if isinstance(observation_space, Box) else ()
    action_shape = tuple(action_space.shape) if isinstance(action_space, Box) else ()
    expected = {
        "observations": (steps + 1, *obs_shape),
        "actions": (steps, *action_shape),
        "terminations": (steps,),
        "truncations": (steps,),
    }
    for name, shape in expected.items():
        found = tuple(np.shape(getattr(episode, name)))
        if found != shape:
            raise DatasetError(
                f"{where}: {name} of shape {found}, expected {shape} for {steps} steps of "
                f"{observation_space} observations and {action_space} actions"
            )
    for name in ("observations", "actions", "rewards"):
        values = np.asarray(getattr(episode, name))
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise DatasetError(f"{where}: {name} hold NaN or inf")
    if isinstance(action_space, Discrete):
        actions = np.asarray(episode.actions)
        if actions.dtype.kind not in "iu" or actions.min() < 0 or actions.max() >= action_space.n:
            raise DatasetError(f"{where}: actions outside Discrete({action_space.n})")
    ends = np.asarray(episode.terminations, dtype=bool) | np.asarray(episode.truncations, dtype=bool)
    if ends[:-1].any():
        raise DatasetError(f"{where}: the episode ends before its last step")
    if not math.isfinite(float(np.asarray(episode.rewards, dtype=np.float64).sum())):
        raise DatasetError(f"{where}: rewards hold NaN or inf")
