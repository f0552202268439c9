"""Tag-v0 against a per-agent reference of its rules (observations on both selection paths,
steps), NumPy and torch step for step (``check_consistency``), resets, checkpoints, chunking
and its memory bound, and no host sync on CUDA."""

from __future__ import annotations

import io
import math
import tracemalloc

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
    random_states,
    reference_obs,
    reference_step,
    split,
)

import msrl
import msrl.envs
from msrl.envs.consistency import check_consistency
from msrl.envs.tag import Tag


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    return request.param


@pytest.mark.parametrize("num_runners, num_observed", [(7, 3), (47, 5)])  # a full sort, then the partition path
def test_observations_match_the_reference(backend, num_runners, num_observed):
    env = make(6, backend, num_taggers=3, num_runners=num_runners, num_observed=num_observed)
    rng = np.random.default_rng(num_runners)
    states = random_states(env, rng, grid=1.0)
    states[0, 4 * env.num_agents + 3 : 5 * env.num_agents] = 0.0  # every runner out: inactive ones fill the places
    env.set_state(states)
    obs = env.observe()
    for e in range(env.num_envs):
        np.testing.assert_allclose(obs_rows(obs, e), reference_obs(env, states[e]), **close(backend))


def test_step_matches_the_reference():
    env = make(5, num_taggers=2, num_runners=4, tagging_distance=2.5, max_episode_steps=6)
    rng = np.random.default_rng(1)
    for _ in range(12):
        before = random_states(env, rng)
        env.set_state(before)  # a new episode: the time limit stays far
        acts = {g: rng.integers(0, 15, (5, grp.num_agents)) for g, grp in env.groups.items()}
        obs, rewards, terminated, _ = env.step(acts)
        after = env.get_state()
        for e in range(5):
            new, reward, term = reference_step(env, before[e], [*acts["taggers"][e], *acts["runners"][e]])
            np.testing.assert_array_equal(
                np.concatenate([rewards["taggers"][e], rewards["runners"][e]]), np.float32(reward)
            )
            assert terminated[e] == term
            if not term:  # else it restarted
                np.testing.assert_allclose(after[e], new, rtol=1e-15, atol=1e-15)
                np.testing.assert_allclose(obs_rows(obs, e), reference_obs(env, new), rtol=1e-6, atol=1e-7)


# -- backends, resets, checkpoints, chunks -----------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_observed": 3, "runner_exits_game_after_tagged": False},
        {"num_taggers": 4, "num_runners": 36, "num_observed": 6, "tagging_distance": 2.0, "max_episode_steps": 30},
    ],
)
def test_numpy_and_torch_agree_step_for_step(kwargs):
    ref = make(8, "numpy", seed=1, **kwargs)
    exact = check_consistency(ref, make(8, "torch-f64", seed=2, **kwargs), 80, seed=3)
    assert exact.ok, exact
    # float32: small rounding; a threshold met within rounding (an edge, the tagging distance,
    # two equal distances) may rarely decide differently, so a few values may differ more.
    single = check_consistency(
        ref, make(8, "torch-f32", seed=2, **kwargs), 80, seed=3, atol=1e-5, rtol=1e-5, resync_every=1
    )
    compared = 80 * 8 * ref.num_agents * (7 + 5 * ref.observed)
    assert single.tolerance_violations["obs"] <= 1e-4 * compared, single
    assert single.tolerance_violations["reward"] <= 2 and single.flag_mismatch_fraction <= 1e-3, single


def test_reset_distribution(backend):
    kwargs = {"num_taggers": 2, "num_runners": 3, "world_size": 6.0}
    env = make(400, backend, seed=3, **kwargs)
    x, y, speed, heading, active, t = split(env, np_(env.get_state()).T)
    for values, high in ((x, 6.0), (y, 6.0), (heading, TWO_PI)):
        assert values.min() >= 0 and values.max() < high
        assert abs(values.mean() - high / 2) < 0.03 * high and abs(values.std() - high / math.sqrt(12)) < 0.03 * high
    assert (speed == 0).all() and (active == 1).all() and (t == 0).all()
    assert not np.array_equal(np_(make(400, backend, seed=4, **kwargs).get_state()), np_(env.get_state()))
    np.testing.assert_array_equal(np_(make(400, backend, seed=3, **kwargs).get_state()), np_(env.get_state()))


def rollout(env: Tag, steps: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        acts = {g: rng.integers(0, 15, (env.num_envs, grp.num_agents)) for g, grp in env.groups.items()}
        obs, rewards, terminated, truncated = env.step(acts)
        out += [*np_(obs).values(), *np_(rewards).values(), np_(terminated), np_(truncated)]
    return out


def test_checkpoint_resumes_exactly(backend):
    kwargs = {"num_runners": 3, "max_episode_steps": 7, "tagging_distance": 3.0}
    env = make(4, backend, seed=1, **kwargs)
    rollout(env, 9, seed=1)
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    restored = make(4, backend, seed=99, **kwargs)
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    a, b = rollout(env, 20, seed=2), rollout(restored, 20, seed=2)  # through resets: the generator resumes too
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    metrics = env.metrics()
    assert metrics == restored.metrics() and metrics["episodes"] >= 4


@pytest.mark.parametrize("backend_name", ["numpy", "torch-f64"])
@pytest.mark.parametrize("num_observed", [0, 4])
def test_chunks_change_nothing(backend_name, num_observed):
    kwargs = {"num_taggers": 3, "num_runners": 37, "num_observed": num_observed}
    whole, chunked = make(9, backend_name, **kwargs), make(9, backend_name, **kwargs)
    chunked.dynamics.physics.chunk_bytes = 1  # one environment per chunk
    assert all(np.array_equal(x, y) for x, y in zip(rollout(whole, 5, 0), rollout(chunked, 5, 0)))


def test_temporaries_stay_within_the_chunk_budget():
    env = make(32, num_taggers=60, num_runners=240, num_observed=4)
    env.dynamics.physics.chunk_bytes = 2**20
    acts = {g: np.full((32, grp.num_agents), NOOP) for g, grp in env.groups.items()}
    env.step(acts)
    tracemalloc.start()
    try:
        env.step(acts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Unchunked, the coordinate differences alone would take 32 envs x 300 x 300 pairs x 2 x 8 bytes = 46 MB;
    # one environment's temporaries plus the outputs (1 MB of observations) stay near 6 MB.
    assert peak < 8e6, peak


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_step_does_not_sync_on_cuda():
    env = msrl.envs.make("Tag-v0", num_envs=64, seed=0, backend="torch", device="cuda", num_runners=40, num_observed=5)
    acts = {g: torch.zeros((64, grp.num_agents), dtype=torch.int64, device="cuda") for g, grp in env.groups.items()}
    env.step(acts)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            env.step(acts)
    finally:
        torch.cuda.set_sync_debug_mode("default")
