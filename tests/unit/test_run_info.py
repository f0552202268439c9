"""``RunInfo``: the named seed streams an algorithm draws from, one table of offsets rather than
offsets at call sites, and the number of updates a schedule counts towards.  Each stream's offset is
fixed, so the runs that tests pin (exact resume, preset exactness, learning thresholds) reproduce."""

from __future__ import annotations

import pytest
import torch

from msrl.core import RunInfo

SEED_STREAMS = RunInfo.STREAMS


def test_streams_keep_the_offsets_the_algorithms_used() -> None:
    run = RunInfo.for_copy(seed=5, total_env_steps=1000, copy=3, copies=4)
    assert run.data_seed == 5 + 1_000_003 * 3
    # shared by every copy: from the run's seed
    assert run.seed_for("weights") == 5
    assert run.seed_for("learner") == 5 + 2
    assert run.seed_for("dataset", 1) == 5 + 3 + 7919  # a dataset's stratum 1
    assert run.seed_for("eval") == 5 + 7919  # the final evaluation's environments
    # each copy's own: from its data seed
    assert run.seed_for("env") == run.data_seed
    assert run.seed_for("actor") == run.data_seed + 1
    assert run.seed_for("replay") == run.data_seed + 2
    # the index-th network of a run (MAPPO's policies)
    assert run.seed_for("weights", 2) == 5 + 7919 * 2


def test_copy_zero_is_the_local_run() -> None:
    local = RunInfo(seed=9, data_seed=9, total_env_steps=100)
    first = RunInfo.for_copy(9, 100, copy=0, copies=1)
    assert all(local.seed_for(name) == first.seed_for(name) for name in SEED_STREAMS)


def test_shared_streams_agree_across_copies_and_own_streams_do_not() -> None:
    copies = [RunInfo.for_copy(1, 1000, copy, 3) for copy in range(3)]
    for name, stream in SEED_STREAMS.items():
        seeds = {run.seed_for(name) for run in copies}
        assert len(seeds) == (3 if stream.per_copy else 1), name


def test_no_two_streams_of_a_copy_share_a_seed_unless_one_is_shared_and_one_its_own() -> None:
    """Within each kind (shared, per copy) the offsets differ, so two streams never draw alike."""
    run = RunInfo.for_copy(0, 10, copy=1, copies=2)
    for per_copy in (False, True):
        names = [name for name, stream in SEED_STREAMS.items() if stream.per_copy == per_copy]
        assert len({run.seed_for(name) for name in names}) == len(names)


def test_rng_is_a_generator_seeded_from_the_stream() -> None:
    run = RunInfo.for_copy(4, 100, copy=1, copies=2)
    expected = torch.Generator().manual_seed(run.seed_for("actor", 1))
    assert torch.equal(torch.rand(5, generator=run.rng("actor", 1)), torch.rand(5, generator=expected))
    assert run.rng("actor").device == torch.device(run.device)


def test_unknown_stream_and_negative_index_name_the_problem() -> None:
    run = RunInfo()
    streams = "weights, learner, dataset, eval, env, actor, replay"
    with pytest.raises(ValueError, match=rf"unknown seed stream 'actors'.*{streams}"):
        run.seed_for("actors")
    with pytest.raises(ValueError, match="index must be >= 0"):
        run.rng("env", -1)


@pytest.mark.parametrize(
    ("total", "per_update", "expected"), [(1000, 100, 10), (1001, 100, 11), (99, 100, 1), (0, 100, 1)]
)
def test_num_updates_rounds_up_and_is_at_least_one(total: int, per_update: int, expected: int) -> None:
    assert RunInfo(total_env_steps=total).num_updates(per_update) == expected


def test_num_updates_rejects_an_empty_update() -> None:
    with pytest.raises(ValueError, match="env_steps_per_update must be >= 1"):
        RunInfo(total_env_steps=10).num_updates(0)
