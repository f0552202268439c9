"""The episode bookkeeping done inside the step kernel (``name_step_tracked``, the kernel
backends' default): over runs with many finished episodes it gives the NumPy backend's
metrics and checkpoints bit for bit, the same as the host bookkeeping does
(``fuse_episodes=False``) in float and double builds and on the accelerator's mask path,
and a checkpoint resumes across the two.  The GPU test at the end is skipped without
pycuda or a GPU.

Every build goes to a temporary MSRL_CACHE_DIR, once per configuration.
"""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest
import torch
from kernel_support import EmulatedTorchModule, needs_gpu, same_bits

from fragments.cuda import emulated_env
from msrl.envs import Kernels, TorchArrays
from msrl.envs.cartpole import CartPole
from msrl.envs.pendulum import Pendulum

cartpole_emulated, pendulum_emulated = (functools.partial(emulated_env, cls) for cls in (CartPole, Pendulum))


pytestmark = pytest.mark.usefixtures("kernel_cache")

ENVS = {"cartpole": (CartPole, cartpole_emulated), "pendulum": (Pendulum, pendulum_emulated)}


def _roundtrip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _host(value):
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def same_episodes(a: dict, b: dict, what: str) -> None:
    """Two ``state_dict()["episodes"]`` are equal bit for bit."""
    assert a.keys() == b.keys(), what
    for key in a:
        if isinstance(a[key], torch.Tensor):
            same_bits(_host(a[key]), _host(b[key]), f"{what}: {key}")
        else:
            assert type(a[key]) is type(b[key]) and a[key] == b[key], f"{what}: {key} {a[key]} != {b[key]}"


def actions(name: str, n: int, steps: int, seed: int = 0) -> np.ndarray:
    """CartPole: random pushes with a bias that varies by env (episodes of many lengths, some
    reaching the 500-step limit); Pendulum: float32 torques, past the +-2 clip."""
    rng = np.random.default_rng(seed)
    if name == "cartpole":
        return (rng.random((steps, n)) < np.linspace(0.5, 0.9, n)).astype(np.int64)
    return rng.uniform(-2.5, 2.5, (steps, n, 1)).astype(np.float32)


def pd_actions(obs: np.ndarray, t: int) -> np.ndarray:
    """A balancing controller, flipped on some envs: both 500-step truncations and terminations."""
    x, x_dot, theta, theta_dot = obs.T
    action = (10 * theta + 2 * theta_dot + 0.1 * x + 0.2 * x_dot > 0).astype(np.int64)
    flip = (np.arange(obs.shape[0]) % 4 == 0) & ((t * 7 + np.arange(obs.shape[0])) % 5 == 0)
    return np.where(flip, 1 - action, action)


@pytest.mark.parametrize("name", sorted(ENVS))
def test_fused_bookkeeping_gives_numpys_metrics_and_checkpoints(name):
    """Lockstep with the NumPy backend (double build), states re-synced where an episode ended
    (the two draw resets from different generators): every metrics window and checkpoint equal
    NumPy's bit for bit, also after the kernel env is resumed from a checkpoint mid-run."""
    numpy_cls, emulated = ENVS[name]
    n, steps = 64, 1100 if name == "cartpole" else 700
    reference, env = numpy_cls(n, seed=1), emulated(n, seed=2, dtype=np.float64)
    assert env.dynamics.fuse_episodes
    env.set_state(reference.get_state())
    random = actions(name, n, steps)
    obs, finished = reference.observe(), 0
    for t in range(steps):
        action = pd_actions(obs, t) if name == "cartpole" and t % 300 < 200 else random[t]
        ref = reference.step(action.copy())
        out = env.step(action.copy())
        for i in (1, 2, 3):
            same_bits(ref[i], out[i], f"step {t}: output {i}")
        done = (ref[2] + ref[3]) > 0
        if done.any():
            env.set_state(reference.get_state(), done)  # fresh episodes: nothing to forget
        obs = ref[0]
        if t % 50 == 49:
            expected = reference.metrics()
            assert env.metrics() == expected, f"step {t}"
            finished += expected.get("episodes", 0)
        if t % 70 == 69:
            same_episodes(reference.state_dict()["episodes"], env.state_dict()["episodes"], f"step {t}")
        if t == steps // 2:  # resume mid-window into a differently seeded env
            resumed = emulated(n, seed=99, dtype=np.float64)
            resumed.load_state_dict(_roundtrip(env.state_dict()))
            env = resumed
    assert env.metrics() == reference.metrics()
    assert finished > (1000 if name == "cartpole" else 2 * n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float", "double"])
@pytest.mark.parametrize("name", sorted(ENVS))
def test_fused_and_host_bookkeeping_agree_bit_for_bit(name, dtype):
    """The same kernels with the bookkeeping fused or on the host: outputs, metrics and
    checkpoints equal throughout, through reset, set_state and checkpoints that cross
    from one path to the other."""
    emulated = ENVS[name][1]
    n, steps = 48, 900
    fused, host = emulated(n, seed=5, dtype=dtype), emulated(n, seed=5, dtype=dtype, fuse_episodes=False)
    assert fused.dynamics.fuse_episodes and not host.dynamics.fuse_episodes
    random = actions(name, n, steps, seed=1)
    for t in range(steps):
        for a, b in zip(fused.step(random[t]), host.step(random[t])):
            same_bits(a, b, f"step {t}")
        if t % 40 == 39:
            assert fused.metrics() == host.metrics(), f"step {t}"
        if t % 150 == 100:
            mask = np.arange(n) % 3 == t % 3
            fused.set_state(fused.get_state(), mask)
            host.set_state(host.get_state(), mask)
        if t == 450:
            fused.reset(seed=8)
            host.reset(seed=8)
        if t % 200 == 199:  # swap the two paths' checkpoints
            state_fused, state_host = fused.state_dict(), host.state_dict()
            same_episodes(state_fused["episodes"], state_host["episodes"], f"step {t}")
            fused.load_state_dict(_roundtrip(state_host))
            host.load_state_dict(_roundtrip(state_fused))
    assert fused.metrics() == host.metrics()


def test_fused_bookkeeping_on_the_accelerators_mask_path():
    """The cuda backend's host code (torch tensors, masks: what runs on a GPU) launched on the
    emulation: the fused step keeps the host bookkeeping's metrics and checkpoint, with a
    rollout (whose episodes bypass metrics) in between."""
    loader = lambda source, defines: EmulatedTorchModule(source, defines, torch.device("cpu"))  # noqa: E731
    arrays = TorchArrays("cpu", torch.float64, columns=False, sparse=False)
    env = CartPole(32, seed=4, backend=arrays, kernels=Kernels(loader))
    host = CartPole(32, seed=4, backend=arrays, kernels=Kernels(loader, fuse_episodes=False))
    random = torch.from_numpy(actions("cartpole", 32, 400, seed=3))
    finished = 0
    for t in range(400):
        for a, b in zip(env.step(random[t]), host.step(random[t])):
            assert torch.equal(a, b), f"step {t}"
        if t == 200:
            same_bits(env.rollout(50).numpy(), host.rollout(50).numpy(), "rollout")
        if t % 60 == 59:
            expected = host.metrics()
            assert env.metrics() == expected, f"step {t}"
            finished += expected.get("episodes", 0)
        if t == 300:
            same_episodes(env.state_dict()["episodes"], host.state_dict()["episodes"], f"step {t}")
    assert env.metrics() == host.metrics() and finished > 300


def test_fuse_episodes_reaches_the_kernels_by_name():
    import fragments  # noqa: F401  (registers the backends)
    import msrl.envs

    host = msrl.envs.make("Pendulum-v1", num_envs=2, backend="cuda-emulated", fuse_episodes=False)
    assert not host.dynamics.fuse_episodes
    assert msrl.envs.make("Pendulum-v1", num_envs=2, backend="cuda-emulated").dynamics.fuse_episodes


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpu_fused_step_matches_the_host_bookkeeping_without_syncing(dtype):
    from fragments.cuda import cuda_env

    for name, (env_cls, _) in ENVS.items():
        make = functools.partial(cuda_env, env_cls)
        fused, host = make(4096, seed=3, dtype=dtype), make(4096, seed=3, dtype=dtype, fuse_episodes=False)
        random = torch.from_numpy(actions(name, 4096, 600)).cuda()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # a host sync in a step raises
        try:
            outputs = [(fused.step(random[t]), host.step(random[t])) for t in range(600)]
        finally:
            torch.cuda.set_sync_debug_mode("default")
        for t, (a, b) in enumerate(outputs):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), f"{name} step {t}"
        same_episodes(fused.state_dict()["episodes"], host.state_dict()["episodes"], name)
        metrics = fused.metrics()
        assert metrics == host.metrics() and metrics["episodes"] > 4096
