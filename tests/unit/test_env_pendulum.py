"""Pendulum-v1 backends: bit-exact agreement with gymnasium (clipping, angle
normalisation, time limit), autoreset, seeding, checkpoints, validation, metrics,
on NumPy, torch (index and mask paths) and the emulated CUDA kernels."""

from __future__ import annotations

import functools
import io
import math

import numpy as np
import pytest
import torch

import msrl.envs
from fragments.cuda import emulated_env
from msrl import Box, CheckpointError, EnvError
from msrl.envs import TorchArrays
from msrl.envs.pendulum import Pendulum

pendulum_emulated = functools.partial(emulated_env, Pendulum)  # the cuda-emulated backend


BACKENDS = {
    "numpy": lambda n, seed=0: Pendulum(n, seed=seed),
    "torch-f32": lambda n, seed=0: Pendulum(n, seed=seed, backend="torch", dtype=torch.float32),
    "torch-f64": lambda n, seed=0: Pendulum(n, seed=seed, backend="torch", dtype=torch.float64),
    "torch-masks": lambda n, seed=0: Pendulum(n, seed=seed, backend=TorchArrays("cpu", torch.float64, sparse=False)),
    "kernels-f64": lambda n, seed=0: pendulum_emulated(n, seed=seed, dtype=np.float64),
}


def torch_pendulum(n: int, seed: int = 0, **options) -> Pendulum:
    return Pendulum(n, seed=seed, backend="torch", **options)


def np_(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.fixture(params=sorted(BACKENDS))
def make(request):
    return BACKENDS[request.param]


@pytest.mark.parametrize("action_dtype", [np.float32, np.float64])
def test_matches_gymnasium_exactly(action_dtype):
    gym = pytest.importorskip("gymnasium")
    n = 8
    env = Pendulum(n, seed=3)
    state = env.get_state()
    state[0] = [7.0, 8.0]  # more than a turn: exercises angle normalisation from the start
    state[1] = [-20.0, -3.0]
    env.set_state(state)
    refs = [gym.make("Pendulum-v1") for _ in range(n)]
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
        ref.unwrapped.state = state[i].copy()
    rng = np.random.default_rng(0)
    obs = env.observe()
    truncations = 0
    for t in range(650):
        # Half pump energy with too-large torques (spinning: angles grow past +-pi, torque gets
        # clipped), half act randomly in [-3, 3] (also clipped).
        pump = 2.5 * np.sign(obs[:, 2:3])
        action = np.where(np.arange(n)[:, None] < n // 2, pump, rng.uniform(-3, 3, (n, 1))).astype(action_dtype)
        obs, reward, terminated, truncated = env.step(action)
        assert not terminated.any()
        for i, ref in enumerate(refs):
            r_obs, r_reward, r_term, r_trunc, _ = ref.step(action[i])
            assert reward[i] == np.float32(r_reward), (t, i)
            assert (terminated[i], truncated[i]) == (float(r_term), float(r_trunc)), (t, i)
            if r_trunc:
                truncations += 1
                new_state = env.get_state()[i]
                ref.reset()
                ref.unwrapped.state = new_state.copy()
            else:
                np.testing.assert_array_equal(obs[i], r_obs, err_msg=f"step {t} env {i}")
    assert truncations == 3 * n  # at steps 200, 400 and 600 everywhere
    assert np.abs(env.get_state()[: n // 2, 0]).max() > 3 * math.pi  # the pumped pendulums spun


def test_spaces_and_registry():
    env = msrl.envs.make("Pendulum-v1", num_envs=2, seed=0)
    assert isinstance(env, Pendulum) and env.arrays.name == "numpy"
    assert env.action_space == Box(low=-2.0, high=2.0, shape=(1,), dtype="float32")
    np.testing.assert_array_equal(env.observation_space.high, np.array([1, 1, 8], np.float32))
    torch_env = msrl.envs.make("Pendulum-v1", num_envs=2, seed=0, backend="torch", dtype=torch.float64)
    assert isinstance(torch_env, Pendulum) and torch_env.dtype == torch.float64 and torch_env.arrays.name == "torch"
    assert isinstance(torch_env.step(torch.zeros(2, 1))[1], torch.Tensor)


def test_output_types_and_truncation_at_200(make):
    env = make(3)
    for t in range(1, 201):
        obs, reward, terminated, truncated = env.step(np.zeros((3, 1), np.float32))
        for value, shape in zip((obs, reward, terminated, truncated), [(3, 3), (3,), (3,), (3,)]):
            assert tuple(value.shape) == shape and np_(value).dtype == np.float32
        assert not np_(terminated).any()
        assert np_(truncated).all() == (t == 200) and np_(truncated).any() == (t == 200)
    # Same-step autoreset: the returned observation starts the next episode.
    th, thdot = np_(env.get_state()).T
    assert np.abs(th).max() <= math.pi and np.abs(thdot).max() <= 1.0
    np.testing.assert_allclose(np_(obs), np.stack([np.cos(th), np.sin(th), thdot], 1), atol=1e-6)
    m = env.metrics()
    assert m["episodes"] == 3 and m["episode_length"] == 200.0 and m["episode_return"] < 0


def test_clipping_and_reward_formula(make):
    env = make(2)
    env.set_state(np.array([[3 * math.pi + 0.5, 2.0], [-0.25, -1.0]]))
    _, reward, _, _ = env.step(np.array([[5.0], [-0.5]], np.float32))
    # angle_normalize(3pi + 0.5) = -pi + 0.5; torque 5 is clipped to 2.
    expected = -np.array([(0.5 - math.pi) ** 2 + 0.1 * 4 + 0.001 * 4, 0.25**2 + 0.1 + 0.001 * 0.25])
    np.testing.assert_allclose(np_(reward), expected, rtol=1e-5)
    th, thdot = np_(env.get_state()).T
    np.testing.assert_allclose(thdot[0], min(8.0, 2.0 + (15 * math.sin(3 * math.pi + 0.5) + 3 * 2) * 0.05), rtol=1e-5)


def _rollout(env, steps: int = 250, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [np_(env.observe())]
    for _ in range(steps):
        out.extend(np_(v) for v in env.step(rng.uniform(-2, 2, (env.num_envs, 1)).astype(np.float32)))
    return out


def test_seeding_determinism(make):
    a, b, c = make(4, seed=7), make(4, seed=7), make(4, seed=8)
    ra, rb, rc = _rollout(a), _rollout(b), _rollout(c)
    assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
    assert not np.array_equal(ra[0], rc[0])
    np.testing.assert_array_equal(np_(c.reset(seed=7)), ra[0])
    assert all(np.array_equal(x, y) for x, y in zip(_rollout(c), ra))


def test_state_dict_resumes_bit_exactly(make):
    env = make(4, seed=1)
    _rollout(env, 350, seed=1)  # one time limit passed, its episodes not yet reported
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    buf.seek(0)
    restored = make(4, seed=42)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    a, b = _rollout(env, 300, seed=2), _rollout(restored, 300, seed=2)  # crosses the next time limit
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    ma, mb = env.metrics(), restored.metrics()
    assert ma == mb and ma["episodes"] == 12  # limits at steps 200, 400, 600


def test_state_dict_has_no_numpy_arrays():
    def walk(value):
        assert not isinstance(value, np.ndarray)
        if isinstance(value, dict):
            for v in value.values():
                walk(v)

    walk(Pendulum(2).state_dict())
    with pytest.raises(CheckpointError, match="lacks"):
        Pendulum(2).load_state_dict({"state": torch.zeros(2, 2)})


@pytest.mark.parametrize(
    "action, match",
    [
        (np.zeros((3, 1), np.float32), r"shape \(4, 1\) or \(4,\)"),
        (np.zeros((4, 2), np.float32), r"shape \(4, 1\) or \(4,\)"),
        (np.array([[0.0], [np.nan], [0.0], [0.0]], np.float32), "finite"),
        (np.array([0.0, np.inf, 0.0, 0.0]), "finite"),
        (np.array(["a", "b", "c", "d"]), "floats"),
    ],
)
def test_bad_actions_raise(action, match):
    for env in (Pendulum(4), pendulum_emulated(4)):  # NumPy memory: values always checked
        with pytest.raises(EnvError, match=match):
            env.step(action)


def test_torch_validation_is_opt_in():
    with pytest.raises(EnvError, match="shape"):
        torch_pendulum(4).step(torch.zeros(4, 2))
    nan = torch.tensor([[0.0], [float("nan")], [0.0], [0.0]])
    _, reward, _, _ = torch_pendulum(4).step(nan)  # unchecked: a value check would sync with the device
    assert torch.isnan(reward[1]) and not torch.isnan(reward[0])
    with pytest.raises(EnvError, match="finite"):
        torch_pendulum(4, validate=True).step(nan)


@pytest.mark.parametrize(
    "make_env",
    [lambda: Pendulum(4, seed=1), lambda: torch_pendulum(4, seed=1), lambda: pendulum_emulated(4, seed=1)],
    ids=["numpy", "torch", "kernels"],
)
def test_flat_and_integer_actions_accepted(make_env):
    col = make_env().step(np.array([[1.0], [-1.0], [0.0], [2.0]], np.float32))
    flat = make_env().step(np.array([1.0, -1.0, 0.0, 2.0], np.float32))
    ints = make_env().step(np.array([1, -1, 0, 2]))
    for x, y, z in zip(col, flat, ints):
        np.testing.assert_array_equal(np_(x), np_(y))
        np.testing.assert_array_equal(np_(x), np_(z))


def test_gravity_argument():
    a, b = Pendulum(2, seed=0), Pendulum(2, seed=0, g=9.81)
    zero = np.zeros((2, 1), np.float32)
    assert not np.array_equal(a.step(zero)[0], b.step(zero)[0])
    # the kernels compile g in: the same g gives the NumPy result, bit for bit
    for g in (10.0, 9.81):
        host, kernels = Pendulum(2, seed=0, g=g), pendulum_emulated(2, seed=0, g=g, dtype=np.float64)
        kernels.set_state(host.get_state())
        np.testing.assert_array_equal(host.step(zero)[0], kernels.step(zero)[0])
