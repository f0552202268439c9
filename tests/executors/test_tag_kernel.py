"""Tag's CUDA C kernels (msrl/envs/tag/tag.cu: one block per environment,
threads striding over its agents) against the NumPy backend.

The kernels run on the CPU emulation of the CUDA execution model (each block an
OpenMP team, ``__syncthreads`` a real barrier); the ``MSRL_REAL=double`` build
must match ``msrl.envs.tag.NumpyTag`` bit for bit, observations, rewards, flags
and the float64 state, through tags, runners leaving the game, edge hits, the
end-of-game reward, termination, truncation and the same-step autoreset.  The
registration, the layout limits, the cuda backend's host code, the nvcc build and
the GPU runs are in ``test_tag_kernel_host.py``.

Every build goes to a temporary MSRL_CACHE_DIR (one per configuration: Tag's
constants are compiled in).  Blocks of the emulation cost about a millisecond
each, so batches here are small.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from kernel_support import CROWDED, same_bits, same_outputs

from fragments.cuda import EmulatedModule, emulated_env
from msrl.envs.consistency import check_consistency
from msrl.envs.tag import Tag

tag_emulated = functools.partial(emulated_env, Tag)  # the cuda-emulated backend


pytestmark = pytest.mark.usefixtures("kernel_cache")


def _random_actions(env: Tag, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {name: rng.integers(0, g.action_space.n, (env.num_envs, g.num_agents)) for name, g in env.groups.items()}


def _deactivate(state: np.ndarray, env: Tag, rng: np.random.Generator, fraction: float) -> np.ndarray:
    """Take a random ``fraction`` of the agents (taggers too, which the game itself never
    does) out of the game, to exercise every inactive path of both backends."""
    N = env.num_agents
    state = state.copy()
    state[:, 4 * N : 5 * N] = np.where(rng.random((env.num_envs, N)) < fraction, 0.0, state[:, 4 * N : 5 * N])
    return state


def _lockstep(reference: Tag, emulated: Tag, steps: int, seed: int = 0, deactivate: float = 0.0) -> dict[str, int]:
    """Step both from the same float64 state with the same actions; everything must be
    bit-identical, the float64 state included.  Finished environments are re-synced
    (each backend draws its reset states from its own generator).  Returns how often
    each event the rules distinguish happened, so a test can show it was compared."""
    rng = np.random.default_rng(seed)
    start = reference.get_state()
    if deactivate:
        start = _deactivate(start, reference, rng, deactivate)
    reference.set_state(start)
    emulated.set_state(start)
    for name, obs in reference.observe().items():
        same_bits(obs, emulated.observe()[name], f"initial {name} obs")
    edge_only = np.float32(reference.edge_hit_penalty + reference.step_penalty_for_tagger)  # no tag
    seen = dict.fromkeys(
        ["terminated", "truncated", "tags", "runner_tagged", "edge_hits", "end_of_game", "inactive_observed"], 0
    )
    for t in range(steps):
        action = _random_actions(reference, rng)
        ref = reference.step({k: v.copy() for k, v in action.items()})
        emu = emulated.step({k: v.copy() for k, v in action.items()})
        for i, name in ((2, "terminated"), (3, "truncated")):
            same_bits(ref[i], emu[i], f"step {t}: {name}")
            seen[name] += int(ref[i].sum())
        for group in ("taggers", "runners"):
            same_bits(ref[1][group], emu[1][group], f"step {t}: {group} reward")
        done = (ref[2] + ref[3]) > 0
        for group in ("taggers", "runners"):  # a finished env's obs is its next episode's: drawn differently
            same_bits(ref[0][group][~done], emu[0][group][~done], f"step {t}: {group} obs")
        same_bits(reference.get_state()[~done], emulated.get_state()[~done], f"step {t}: state")
        # With the default rewards these values tell the events apart: only a tag pays a
        # tagger more than 0.5, only a tag costs a runner more than 0.5, only the end of
        # the game pays a runner more than 0.5.
        seen["tags"] += int((ref[1]["taggers"] > 0.5).sum())
        seen["runner_tagged"] += int((ref[1]["runners"] < -0.5).sum())
        seen["edge_hits"] += int((ref[1]["taggers"] == edge_only).sum())
        seen["end_of_game"] += int((ref[1]["runners"] > 0.5).sum())
        for obs in ref[0].values():  # others observed while out of the game (among the nearest: keyed +inf)
            seen["inactive_observed"] += int((obs[..., 7:].reshape(*obs.shape[:2], -1, 5)[..., 4] == 0).sum())
        if done.any():
            emulated.set_state(reference.get_state(), done)
    return seen


# -- the emulated kernels against NumPy, bit for bit --------------------------------------------


@pytest.mark.parametrize("exits", [True, False], ids=["runners-exit", "runners-stay"])
@pytest.mark.parametrize("observed", [0, 3], ids=["observe-all", "3-nearest"])
def test_double_build_matches_numpy_bit_for_bit(exits, observed):
    kw = dict(CROWDED, runner_exits_game_after_tagged=exits, num_observed=observed)
    n = 8
    seen = _lockstep(
        Tag(n, seed=1, **kw), tag_emulated(n, seed=2, dtype=np.float64, **kw), 90, seed=observed, deactivate=0.2
    )
    assert seen["truncated"] > 0 and seen["tags"] > 0 and seen["runner_tagged"] > 0 and seen["edge_hits"] > 0
    assert seen["end_of_game"] > 0
    if exits:
        assert seen["terminated"] > 0  # every runner tagged: the episode ends early
        # Runners out of the game are observed: with 3 nearest, at key +inf once fewer than 3 others are in.
        assert seen["inactive_observed"] > 0
    else:
        # Runners never leave; only the agents deactivated at the start are out (and all four
        # runners of some env being out ends that env's episode at once).
        assert seen["terminated"] <= n


def test_defaults_pass_the_consistency_checker():
    """msrl.envs.consistency's float64 defaults (whole state re-synced every 10 steps, no
    flag mismatch allowed), here met with zero error."""
    report = check_consistency(Tag(16, seed=1), tag_emulated(16, seed=5, dtype=np.float64), 120)
    assert report.ok and report.max_abs_error["obs"] == 0.0 and report.max_abs_error["reward"] == 0.0, str(report)


def test_float32_build_within_the_consistency_tolerances():
    """The float32 build (what the GPU runs) rounds positions differently; the checker's
    float32 defaults re-sync every 5 steps and allow 1e-4."""
    kw = dict(CROWDED, num_observed=3)
    report = check_consistency(Tag(16, seed=1, **kw), tag_emulated(16, seed=5, dtype=np.float32, **kw), 120)
    assert report.ok, str(report)


@pytest.mark.parametrize("observed", [0, 3], ids=["observe-all", "3-nearest"])
def test_more_agents_than_threads_per_block(observed):
    """300 agents on 128 threads: each thread strides over two or three agents in every
    phase, and the 3-nearest selection runs over 299 others.  A 3-step limit makes the
    third step reset all 300 agents of every env on the device."""
    kw = dict(num_taggers=30, num_runners=270, world_size=20.0, num_observed=observed, max_episode_steps=3)
    seen = _lockstep(
        Tag(2, seed=1, **kw),
        tag_emulated(2, seed=2, dtype=np.float64, threads_per_block=128, **kw),
        4,
        seed=1,
        deactivate=0.1,
    )
    assert seen["truncated"] == 2 and seen["tags"] > 0


def test_more_agents_than_a_block_can_have_threads():
    """1,100 agents in one environment, on CUDA's largest block (1,024 threads)."""
    kw = dict(num_taggers=100, num_runners=1000, world_size=30.0, num_observed=3)
    seen = _lockstep(Tag(1, seed=1, **kw), tag_emulated(1, seed=2, dtype=np.float64, threads_per_block=1024, **kw), 2)
    assert seen["tags"] > 0


def test_results_do_not_depend_on_the_block_size():
    """Reset draws are a function of (seed, counter, env, agent) and a step's result does
    not depend on which thread handles which agent: 1, 3 or 256 threads per block (the
    last capped at the 7 agents) give the same bits, autoresets included."""
    rng = np.random.default_rng(0)
    actions = [_random_actions(Tag(4, **CROWDED), rng) for _ in range(40)]
    runs = []
    for threads in (1, 3, 256):
        env = tag_emulated(4, seed=7, dtype=np.float64, threads_per_block=threads, **CROWDED)
        outs = [env.step(a) for a in actions]
        runs.append((env.get_state(), outs))
    for state, outs in runs[1:]:
        same_bits(runs[0][0], state, "state")
        for a, b in zip(runs[0][1], outs):
            same_outputs(a, b)


def test_the_step_needs_its_barriers():
    """The same kernel on a broken emulation whose __syncthreads does nothing, threads run
    one after another: thread 0 tags against runners that have not moved yet and sums
    counts nobody has written, so the step above would catch a missing barrier."""
    kw = dict(num_taggers=30, num_runners=270, world_size=20.0, num_observed=3, max_episode_steps=3)
    env = Tag(2, seed=1, **kw)
    defines = {"MSRL_REAL": "double", **env.kernel_defines()}
    broken = EmulatedModule("tag", {**defines, "MSRL_EMU_NO_BARRIER": None})
    good = EmulatedModule("tag", defines)
    results = []
    for module, mode in ((good, "team"), (broken, "serial")):
        state = env.get_state()
        rng = np.random.default_rng(3)
        tagger_actions = rng.integers(0, 15, (2, 30))
        runner_actions = rng.integers(0, 15, (2, 270))
        out = [
            np.zeros((2, 30, 22), np.float32),
            np.zeros((2, 270, 22), np.float32),
            np.zeros((2, 30), np.float32),
            np.zeros((2, 270), np.float32),
            np.zeros(2, np.float32),
            np.zeros(2, np.float32),
        ]
        module.launch(
            "tag_step", 2, 128, [state, np.zeros(2, np.int64), tagger_actions, runner_actions, *out, 2, 0, 0], mode=mode
        )
        results.append((state, out))
    assert not all(np.array_equal(a, b) for a, b in zip(results[0][1], results[1][1]))


# -- episodes: termination, truncation, autoreset on the device ------------------------------------


def test_termination_truncation_and_autoreset_on_device():
    """Hand-placed agents that stand still (acceleration 0, no turn): in envs 0 and 1 every
    runner is within reach of tagger 0 and leaves (terminated), envs 1 and 3 take their
    30th step (truncated), env 3's state says t = 29 (the end-of-game reward), env 2
    goes on."""
    env = tag_emulated(4, seed=3, dtype=np.float64, **CROWDED)  # 3 taggers, 4 runners, world 4, reach 1.2
    N, T = 7, 3
    state = env.get_state()
    state[:, 2 * N : 3 * N] = 0.0  # speed
    state[:, 3 * N : 4 * N] = 1.0  # heading: away from the edges is not needed at speed 0
    state[:, [0, N]] = 2.0  # tagger 0 at (2, 2)
    state[:, [1, 2, N + 1, N + 2]] = 3.5  # taggers 1, 2 at (3.5, 3.5): 1.8 from the runners of envs 0, 1
    state[:2, T:N] = 2.5  # envs 0, 1: runners at (2.5, 2), 0.5 from tagger 0
    state[:2, N + T : 2 * N] = 2.0
    state[2:, T:N] = 3.9  # envs 2, 3: runners at (3.9, 0.1), out of everyone's reach
    state[2:, N + T : 2 * N] = 0.1
    state[:, 5 * N] = [3, 3, 3, 29]
    env.set_state(state)
    snapshot = env.state_dict()
    snapshot["episodes"]["running_length"] = torch.tensor([3, 29, 3, 29])  # envs 1 and 3: the step that makes 30
    env.load_state_dict(snapshot)
    stay = 1 * 5 + 2  # acceleration level 1 of 3 (0.0), turn level 2 of 5 (0.0)
    obs, reward, terminated, truncated = env.step({"taggers": np.full((4, T), stay), "runners": np.full((4, 4), stay)})
    np.testing.assert_array_equal(terminated, [1, 1, 0, 0])
    np.testing.assert_array_equal(truncated, [0, 1, 0, 1])
    # rewards in the rules' order: (edge,) step, tags, end of game
    tagger = np.float32([[-0.01 + 4 * 1.0, -0.01, -0.01]] * 2 + [[-0.01] * 3] * 2)
    np.testing.assert_array_equal(reward["taggers"], tagger)
    runner = np.float32([[0.01 + -1.0] * 4] * 2 + [[0.01] * 4, [0.01 + 1.0] * 4])
    np.testing.assert_array_equal(reward["runners"], runner)
    new = env.get_state()
    done = np.array([True, True, False, True])
    # A finished env restarted in the same step: fresh positions, everyone in, t = 0, and
    # the obs returned is the first of the new episode.
    assert np.all(new[done, 4 * N : 5 * N] == 1.0) and np.all(new[done, 5 * N] == 0.0)
    assert np.all(new[done, 2 * N : 3 * N] == 0.0)
    assert np.all((new[done, : 2 * N] >= 0) & (new[done, : 2 * N] < 4.0))
    assert np.all((new[done, 3 * N : 4 * N] >= 0) & (new[done, 3 * N : 4 * N] < 2 * np.pi))
    assert not np.array_equal(new[0, : 2 * N], new[1, : 2 * N])  # each env draws its own
    np.testing.assert_array_equal(new[2], state[2] + np.eye(5 * N + 1)[5 * N])  # env 2: only t moved
    np.testing.assert_array_equal(obs["runners"][done, :, 6], 0.0)  # t / max_episode_steps
    np.testing.assert_array_equal(obs["taggers"][done, 0, :2], (new[done][:, [0, N]] / 4.0).astype(np.float32))
    expected = {"taggers": np.zeros((4, T, 37), np.float32), "runners": np.zeros((4, 4, 37), np.float32)}
    env.dynamics.observe(new, expected)
    for group in obs:
        np.testing.assert_array_equal(obs[group], expected[group])
    np.testing.assert_array_equal(env.get_elapsed(), np.where(done, 0, 4))
    assert env.metrics()["episodes"] == 3


def test_seeding_and_checkpoints_resume_exactly():
    kw = dict(CROWDED, dtype=np.float64)
    a = tag_emulated(6, seed=11, **kw)
    b = tag_emulated(6, seed=11, **kw)
    np.testing.assert_array_equal(a.get_state(), b.get_state())
    assert not np.array_equal(a.get_state(), tag_emulated(6, seed=12, **kw).get_state())
    first = a.reset(seed=4)
    for group, obs in tag_emulated(6, seed=4, **kw).observe().items():
        np.testing.assert_array_equal(first[group], obs)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a.step(_random_actions(a, rng))
    saved = a.state_dict()
    c = tag_emulated(6, seed=99, **kw)
    c.load_state_dict(saved)
    ends = 0
    for _ in range(60):  # autoresets included: the Philox counter was restored too
        action = _random_actions(a, rng)
        out_a, out_c = a.step(action), c.step(action)
        same_outputs(out_a, out_c)
        ends += int((out_a[2] + out_a[3]).astype(bool).sum())
    assert ends > 0
    assert a.metrics() == c.metrics()
