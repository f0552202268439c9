"""Datasets of recorded episodes, for learning from data: Minari's on-disk format (``hdf5``
storage), written and read with h5py (or read with Minari's own reader where it is installed),
and ``DatasetReplay``, the buffer component an offline learner samples in place of an
environment.  ``msrl record`` writes one from a checkpoint, ``msrl merge`` joins several;
``algo.dataset`` points an offline algorithm at it."""

from msrl.data._minari import (
    FORMAT_VERSION,
    DatasetInfo,
    Episode,
    Transitions,
    merge_datasets,
    read_episodes,
    read_info,
    space_from_json,
    space_to_json,
    transitions,
    write_dataset,
)
from msrl.data._replay import DatasetReplay, check_dataset_env, observation_statistics

__all__ = [
    "FORMAT_VERSION",
    "DatasetInfo",
    "DatasetReplay",
    "Episode",
    "Transitions",
    "check_dataset_env",
    "merge_datasets",
    "observation_statistics",
    "read_episodes",
    "read_info",
    "space_from_json",
    "space_to_json",
    "transitions",
    "write_dataset",
]
