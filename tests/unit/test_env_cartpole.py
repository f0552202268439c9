"""CartPole-v1 backends: bit-exact agreement with gymnasium, autoreset, seeding,
checkpoints, action validation and episode metrics.  The shared behaviour is
checked on every backend: NumPy, torch (index and mask paths, float32 and
float64) and the CUDA kernels run by the CPU emulation."""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest
import torch

import msrl.envs
from fragments.cuda import emulated_env
from msrl import Box, Discrete, EnvError
from msrl.envs import TorchArrays
from msrl.envs.cartpole import CartPole

cartpole_emulated = functools.partial(emulated_env, CartPole)  # the cuda-emulated backend


BACKENDS = {
    "numpy": lambda n, seed=0: CartPole(n, seed=seed),
    "torch-f32": lambda n, seed=0: CartPole(n, seed=seed, backend="torch", dtype=torch.float32),
    "torch-f64": lambda n, seed=0: CartPole(n, seed=seed, backend="torch", dtype=torch.float64),
    # the accelerator's path (finished envs as masks, dense reset draws), run on the CPU
    "torch-masks": lambda n, seed=0: CartPole(n, seed=seed, backend=TorchArrays("cpu", torch.float64, sparse=False)),
    "kernels-f64": lambda n, seed=0: cartpole_emulated(n, seed=seed, dtype=np.float64),
}


def torch_cartpole(n: int, seed: int = 0, **options) -> CartPole:
    return CartPole(n, seed=seed, backend="torch", **options)


def np_(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def pd_policy(obs: np.ndarray) -> np.ndarray:
    """Keeps the pole up (and the cart near the middle) for 500+ steps."""
    x, x_dot, theta, theta_dot = np_(obs).T
    return (10 * theta + 2 * theta_dot + 0.1 * x + 0.2 * x_dot > 0).astype(np.int64)


@pytest.fixture(params=sorted(BACKENDS))
def make(request):
    return BACKENDS[request.param]


def test_matches_gymnasium_exactly():
    gym = pytest.importorskip("gymnasium")
    n = 8
    env = CartPole(n, seed=3)
    refs = [gym.make("CartPole-v1") for _ in range(n)]
    state = env.get_state()
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
        ref.unwrapped.state = state[i].copy()
    rng = np.random.default_rng(0)
    obs = env.observe()
    terminations = truncations = 0
    for t in range(1100):
        # Half the carts follow a controller (reaching the 500-step limit), half act randomly (falling).
        action = np.where(np.arange(n) < n // 2, pd_policy(obs), rng.integers(0, 2, n))
        obs, reward, terminated, truncated = env.step(action)
        for i, ref in enumerate(refs):
            r_obs, r_reward, r_term, r_trunc, _ = ref.step(int(action[i]))
            assert (reward[i], terminated[i], truncated[i]) == (r_reward, float(r_term), float(r_trunc)), (t, i)
            if r_term or r_trunc:
                terminations += r_term
                truncations += r_trunc
                # Same-step autoreset: our obs is the new episode's first; give gymnasium that state.
                new_state = env.get_state()[i]
                np.testing.assert_array_equal(obs[i], new_state.astype(np.float32))
                ref.reset()
                ref.unwrapped.state = new_state.copy()
            else:
                np.testing.assert_array_equal(obs[i], r_obs, err_msg=f"step {t} env {i}")
    assert terminations >= 10 and truncations >= 4


def test_spaces_and_registry():
    env = msrl.envs.make("CartPole-v1", num_envs=4, seed=0)
    assert isinstance(env, CartPole) and env.arrays.name == "numpy"
    assert env.action_space == Discrete(2)
    assert isinstance(env.observation_space, Box) and env.observation_space.shape == (4,)
    np.testing.assert_allclose(env.observation_space.high[[0, 2]], [4.8, 0.41887903], rtol=1e-6)
    torch_env = msrl.envs.make("CartPole-v1", num_envs=4, seed=0, backend="torch")
    assert isinstance(torch_env, CartPole) and torch_env.arrays.name == "torch"
    assert isinstance(torch_env.observe(), torch.Tensor) and torch_env.observe().shape == (4, 4)
    assert {"numpy", "torch", "gymnasium"} <= set(msrl.envs.backends("CartPole-v1"))


def test_output_types(make):
    env = make(5)
    obs = env.reset()
    assert tuple(obs.shape) == (5, 4)
    out = env.step(np.zeros(5, np.int64))
    for value, shape in zip(out, [(5, 4), (5,), (5,), (5,)]):
        assert tuple(value.shape) == shape
        assert np_(value).dtype == np.float32
    assert (np_(out[1]) == 1.0).all()
    assert all(isinstance(v, torch.Tensor) for v in out) == (env.arrays.name == "torch")


def test_autoreset_on_termination(make):
    env = make(3)
    state = np.zeros((3, 4))
    state[1] = [0.0, 0.0, 0.2, 2.0]  # falls past 12 degrees on the next step
    state[2] = [2.39, 1.0, 0.0, 0.0]  # leaves the track on the next step
    env.set_state(state)
    obs, reward, terminated, truncated = (np_(v) for v in env.step(np.array([1, 1, 1])))
    np.testing.assert_array_equal(terminated, [0, 1, 1])
    np.testing.assert_array_equal(truncated, [0, 0, 0])
    np.testing.assert_array_equal(reward, [1, 1, 1])
    assert np.abs(obs[1:]).max() <= 0.05  # first observations of the new episodes
    assert obs[0, 1] > 0  # env 0 was pushed right and not reset
    np.testing.assert_allclose(np_(env.observe()), obs)
    assert env.metrics() == {"episode_return": 1.0, "episode_length": 1.0, "episodes": 2}


def test_truncation_at_500_steps(make):
    env = make(4)
    env.set_state(np.zeros((4, 4)))
    obs = env.observe()
    for t in range(1, 501):
        obs, _, terminated, truncated = (np_(v) for v in env.step(pd_policy(obs)))
        assert not terminated.any()
        assert truncated.all() == (t == 500) and truncated.any() == (t == 500)
    assert np.abs(obs).max() <= 0.05
    assert env.metrics() == {"episode_return": 500.0, "episode_length": 500.0, "episodes": 4}


def _rollout(env, steps: int = 200, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [np_(env.observe())]
    for _ in range(steps):
        out.extend(np_(v) for v in env.step(rng.integers(0, 2, env.num_envs)))
    return out


def test_seeding_determinism(make):
    a, b, c = make(6, seed=7), make(6, seed=7), make(6, seed=8)
    ra, rb, rc = _rollout(a), _rollout(b), _rollout(c)
    assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
    assert not np.array_equal(ra[0], rc[0])
    # reset(seed=s) restarts the generator: same first states as constructing with s.
    np.testing.assert_array_equal(np_(c.reset(seed=7)), ra[0])
    assert all(np.array_equal(x, y) for x, y in zip(_rollout(c), ra))
    assert not np.array_equal(np_(a.reset()), ra[0])


def test_state_dict_resumes_bit_exactly(make):
    env = make(8, seed=1)
    _rollout(env, 75, seed=1)  # mid-episode, with some finished episodes not yet reported
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    buf.seek(0)
    restored = make(8, seed=99)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    np.testing.assert_array_equal(np_(restored.get_state()), np_(env.get_state()))
    a, b = _rollout(env, 300, seed=2), _rollout(restored, 300, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert env.metrics() == restored.metrics()


def test_load_state_dict_rejects_other_batch_size(make):
    from msrl import CheckpointError

    with pytest.raises(CheckpointError, match=r"\(3, 4\)"):
        make(3).load_state_dict(make(5).state_dict())


@pytest.mark.parametrize(
    "action, match",
    [
        (np.zeros(5, np.int64), r"shape \(4,\)"),
        (np.zeros((4, 1), np.int64), r"shape \(4,\)"),
        (np.array([0, 1, 2, 0]), "0 or 1"),
        (np.array([0, -1, 1, 0]), "0 or 1"),
        (np.array([0.0, 0.5, 1.0, 0.0]), "0 or 1"),
        (np.array([0.0, np.nan, 1.0, 0.0]), "0 or 1"),
        (np.array(["a", "b", "c", "d"]), "0 or 1"),
    ],
)
def test_bad_actions_raise(action, match):
    """NumPy-backed envs (host physics and emulated kernels) always check values."""
    for env in (CartPole(4), cartpole_emulated(4)):
        with pytest.raises(EnvError, match=match):
            env.step(action)


def test_torch_validation_is_opt_in():
    with pytest.raises(EnvError, match=r"shape \(4,\)"):  # shapes are always checked
        torch_cartpole(4).step(torch.zeros(3, dtype=torch.int64))
    bad = torch.tensor([0, 2, 1, -3])
    _, reward, _, _ = torch_cartpole(4).step(bad)  # no value check: it would sync with the device
    assert torch.equal(reward, torch.ones(4))
    # out-of-range values are clamped: 2 pushes like 1, -3 like 0
    expected = torch_cartpole(4).step(torch.tensor([0, 1, 1, 0]))[0]
    assert torch.equal(torch_cartpole(4).step(bad)[0], expected)
    for values in (bad, torch.tensor([0.0, 0.5, 1.0, 0.0])):
        with pytest.raises(EnvError, match="0 or 1"):
            torch_cartpole(4, validate=True).step(values)
    with pytest.raises(EnvError, match="numbers"):
        torch_cartpole(4).step(np.array(["a", "b", "c", "d"]))


@pytest.mark.parametrize(
    "action",
    [
        np.array([0, 1, 1, 0], np.uint8),
        np.array([0, 1, 1, 0], np.int32),
        np.array([0.0, 1.0, 1.0, 0.0]),
        np.array([False, True, True, False]),
        [0, 1, 1, 0],
    ],
)
def test_accepted_action_types_agree(action):
    ref, env = CartPole(4), CartPole(4)
    expected = ref.step(np.array([0, 1, 1, 0]))
    for x, y in zip(env.step(action), expected):
        np.testing.assert_array_equal(x, y)


def test_torch_accepts_numpy_actions():
    a, b = torch_cartpole(4, seed=2), torch_cartpole(4, seed=2)
    for x, y in zip(a.step(np.array([0, 1, 1, 0])), b.step(torch.tensor([0, 1, 1, 0]))):
        assert torch.equal(x, y)


def test_metrics_count_episodes_across_calls(make):
    env = make(16, seed=5)
    rng = np.random.default_rng(5)
    assert env.metrics() == {}
    returns, lengths = np.zeros(16), np.zeros(16)
    finished: list[tuple[float, float]] = []
    for step in range(120):
        _, reward, terminated, truncated = (np_(v) for v in env.step(rng.integers(0, 2, 16)))
        returns += reward
        lengths += 1
        done = (terminated + truncated) > 0
        finished += list(zip(returns[done], lengths[done]))
        returns[done] = lengths[done] = 0
        if step in (40, 119):
            m = env.metrics()
            assert m["episodes"] == len(finished) > 0
            assert m["episode_return"] == pytest.approx(np.mean([r for r, _ in finished]))
            assert m["episode_length"] == pytest.approx(np.mean([n for _, n in finished]))
            finished = []
            assert env.metrics() == {}


def test_set_state_with_mask_starts_new_episodes_only_there(make):
    env = make(4)
    env.set_state(np.zeros((4, 4)))
    obs = env.observe()
    for _ in range(490):
        obs = env.step(pd_policy(obs))[0]
    before = np_(env.get_state())
    new = before.copy()
    new[1] = 0.01
    env.set_state(new, np.array([False, True, False, False]))  # env 1 starts over
    env.set_state(np_(env.get_state()), new_episode=False)  # changes nothing, keeps the time limits
    after = np_(env.get_state())
    np.testing.assert_array_equal(after[[0, 2, 3]], before[[0, 2, 3]])
    np.testing.assert_allclose(after[1], 0.01)
    obs = env.observe()
    for _ in range(10):
        obs, _, _, truncated = env.step(pd_policy(obs))
    np.testing.assert_array_equal(np_(truncated), [1, 0, 1, 1])
    with pytest.raises(EnvError, match=r"\(4, 4\)"):
        env.set_state(np.zeros((4, 2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_step_outputs_are_ordinary_tensors(dtype):
    """The step runs under inference mode; what it returns must still work with autograd
    (a learner may save observations for backward) and must not alias the env's state."""
    env = torch_cartpole(8, seed=3, dtype=dtype)
    outputs = env.step(torch.ones(8, dtype=torch.int64))
    assert not any(t.is_inference() for t in outputs)
    obs = outputs[0]
    layer = torch.nn.Linear(4, 2)
    layer(obs).sum().backward()  # raises for inference tensors, which cannot be saved for backward
    assert layer.weight.grad is not None
    before = env.get_state()
    obs.add_(100.0)  # in place on an output: the env's state is untouched
    torch.testing.assert_close(env.get_state(), before, rtol=0, atol=0)
    env.step(torch.zeros(8, dtype=torch.int64))  # and stepping on after an outside write still works
