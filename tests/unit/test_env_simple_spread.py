"""simple_spread_v3: step for step against mpe2's own parallel_env (its state copied into
ours, then both stepped with the same actions), NumPy against torch, exact checkpoint
resume, the time limit, metrics and the registry."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import msrl
import msrl.envs
from msrl.envs.simple_spread import SimpleSpread


def _mpe2_state(ref) -> np.ndarray:
    """mpe2's world as our state row: agents' positions, their velocities, landmarks."""
    world = ref.unwrapped.world
    return np.concatenate(
        [
            np.concatenate([a.state.p_pos for a in world.agents]),
            np.concatenate([a.state.p_vel for a in world.agents]),
            np.concatenate([lm.state.p_pos for lm in world.landmarks]),
        ]
    )


def _set_mpe2_state(ref, row: np.ndarray) -> None:
    world = ref.unwrapped.world
    n = len(world.agents)
    planes = row.reshape(3, n, 2)
    for i, agent in enumerate(world.agents):
        agent.state.p_pos, agent.state.p_vel = planes[0, i].copy(), planes[1, i].copy()
    for k, landmark in enumerate(world.landmarks):
        landmark.state.p_pos = planes[2, k].copy()


def _stack(ref, values: dict) -> np.ndarray:
    return np.stack([np.asarray(values[agent]) for agent in ref.possible_agents])


@pytest.mark.parametrize("n_agents", [3, 5])
def test_steps_match_mpe2(n_agents: int):
    """Four mpe2 copies against four of ours for four 25-step episodes: the float64 state,
    observations, rewards (float64 rounded once) and truncation identical.  The last episode starts
    with the agents crowded together, so contact forces and collision penalties are large."""
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    copies = 4
    refs = [simple_spread_v3.parallel_env(N=n_agents) for _ in range(copies)]
    env = SimpleSpread(copies, seed=0, N=n_agents)
    rng = np.random.default_rng(n_agents)
    penalised = pushed = 0
    for episode in range(4):
        first = [ref.reset(seed=100 * episode + i)[0] for i, ref in enumerate(refs)]
        if episode == 3:
            for ref in refs:
                row = _mpe2_state(ref)
                row[: 2 * n_agents] *= 0.1  # under 0.3 apart: the discs (radius 0.15) overlap
                _set_mpe2_state(ref, row)
            first = [{a: ref.unwrapped.observe(a) for a in ref.possible_agents} for ref in refs]
        env.set_state(np.stack([_mpe2_state(ref) for ref in refs]))
        np.testing.assert_array_equal(env.observe()["agents"], np.stack([_stack(r, o) for r, o in zip(refs, first)]))
        for t in range(25):
            actions = rng.integers(0, 5, (copies, n_agents))
            obs, rewards, terminated, truncated = env.step({"agents": actions})
            state = env.get_state()
            for i, ref in enumerate(refs):
                r_obs, r_rew, r_term, r_trunc, _ = ref.step(dict(zip(ref.possible_agents, actions[i])))
                np.testing.assert_array_equal(rewards["agents"][i], _stack(ref, r_rew).astype(np.float32))
                assert not any(r_term.values()) and terminated[i] == 0.0
                assert set(r_trunc.values()) == {t == 24} and truncated[i] == float(t == 24)
                if t < 24:  # at the end ours shows the next episode's first observation
                    np.testing.assert_array_equal(obs["agents"][i], _stack(ref, r_obs))
                    np.testing.assert_array_equal(state[i], _mpe2_state(ref))  # float64, to the last bit
                world = ref.unwrapped.world
                penalised += any(ref.unwrapped.scenario.reward(a, world) < 0 for a in world.agents)
                if episode == 3 and t == 0:  # from rest, actions alone give speeds up to 0.5
                    pushed += np.abs(_mpe2_state(ref)[2 * n_agents : 4 * n_agents]).max() > 1.0
    assert penalised >= 10 and pushed == copies, (penalised, pushed)
    for ref in refs:
        ref.close()


def test_continuous_actions_match_mpe2():
    """Box(0, 1, (5,)) actions, some out of bounds (mpe2 clips them with a warning)."""
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from pettingzoo.utils.env_logger import EnvLogger

    copies = 2
    refs = [simple_spread_v3.parallel_env(continuous_actions=True) for _ in range(copies)]
    env = SimpleSpread(copies, seed=0, continuous_actions=True)
    assert env.action_space["agents"].shape == (5,)
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
    env.set_state(np.stack([_mpe2_state(ref) for ref in refs]))
    rng = np.random.default_rng(0)
    EnvLogger.suppress_output()
    try:
        for _t in range(24):
            actions = rng.uniform(-0.25, 1.25, (copies, 3, 5)).astype(np.float32)
            obs, rewards, _, _ = env.step({"agents": actions})
            for i, ref in enumerate(refs):
                r_obs, r_rew, _, _, _ = ref.step(dict(zip(ref.possible_agents, actions[i])))
                np.testing.assert_array_equal(obs["agents"][i], _stack(ref, r_obs))
                np.testing.assert_array_equal(rewards["agents"][i], _stack(ref, r_rew).astype(np.float32))
    finally:
        EnvLogger.unsuppress_output()
    for ref in refs:
        ref.close()


def _crowded(num_envs: int, n_agents: int, seed: int) -> np.ndarray:
    """Start states, half of them with the agents crowded together (strong contact forces)."""
    state = SimpleSpread(num_envs, seed=seed, N=n_agents).get_state()
    state[: num_envs // 2, : 2 * n_agents] *= 0.1
    return state


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_torch_matches_numpy(dtype):
    """float64: equal to the last bit of the float32 outputs (observed identical; torch's
    exp/log1p may differ from libm's by one float64 ulp).  float32: within 1e-4 with the
    state re-aligned every 5 steps (msrl.envs.consistency's float32 protocol); a collision
    count may flip where two agents are within float32 rounding of touching."""
    n_agents, num_envs = 4, 64
    reference = SimpleSpread(num_envs, seed=0, N=n_agents)
    env = SimpleSpread(num_envs, seed=1, N=n_agents, backend="torch", dtype=dtype)
    assert env.get_state().dtype == dtype
    state = _crowded(num_envs, n_agents, seed=2)
    reference.set_state(state)
    env.set_state(state)
    rng = np.random.default_rng(0)
    reward_mismatches = compared = 0
    for t in range(60):
        actions = rng.integers(0, 5, (num_envs, n_agents))
        obs_a, rew_a, term_a, trunc_a = reference.step({"agents": actions})
        obs_b, rew_b, term_b, trunc_b = env.step({"agents": torch.from_numpy(actions)})
        obs_b, rew_b = obs_b["agents"].numpy(), rew_b["agents"].numpy()
        np.testing.assert_array_equal(term_b.numpy(), term_a)
        np.testing.assert_array_equal(trunc_b.numpy(), trunc_a)
        if dtype == torch.float64:
            np.testing.assert_array_max_ulp(rew_b, rew_a["agents"], maxulp=1)
            if not trunc_a.any():
                np.testing.assert_array_max_ulp(obs_b, obs_a["agents"], maxulp=1)
                np.testing.assert_allclose(env.get_state().numpy(), reference.get_state(), rtol=0, atol=1e-12)
        else:
            reward_mismatches += int((np.abs(rew_b - rew_a["agents"]) > 1e-4 + 1e-4 * np.abs(rew_a["agents"])).sum())
            compared += rew_b.size
            if not trunc_a.any():
                np.testing.assert_allclose(obs_b, obs_a["agents"], atol=1e-4, rtol=1e-4)
            if (t + 1) % 5 == 0:
                env.set_state(reference.get_state(), new_episode=False)
        if trunc_a.any():  # each backend drew its own next episode: start b's from a's
            env.set_state(reference.get_state())
    assert reward_mismatches <= 1e-3 * compared


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_checkpoint_resumes_exactly(backend: str):
    """Across autoresets too: the generator's state travels with the checkpoint."""
    options = {"device": "cpu"} if backend == "torch" else {}
    env = msrl.envs.make("simple_spread_v3", 4, seed=3, backend=backend, **options)
    rng = np.random.default_rng(0)
    actions = [{"agents": rng.integers(0, 5, (4, 3))} for _ in range(75)]
    for a in actions[:30]:
        env.step(a)
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    env.metrics()
    other = msrl.envs.make("simple_spread_v3", 4, seed=9, backend=backend, **options)
    other.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    other.metrics()
    for a in actions[30:]:  # two more autoresets at steps 50 and 75
        outs = [
            e.step({"agents": torch.as_tensor(a["agents"]) if backend == "torch" else a["agents"]})
            for e in (env, other)
        ]
        for x, y in zip(*outs):
            x, y = (x["agents"], y["agents"]) if isinstance(x, dict) else (x, y)
            assert torch.equal(torch.as_tensor(x), torch.as_tensor(y))
    m = env.metrics()
    assert m["episodes"] == 8 and m == other.metrics()


def test_time_limit_metrics_and_reset_distribution():
    env = SimpleSpread(3, seed=0, N=2, max_cycles=7)
    state = env.get_state().reshape(3, 3, 2, 2)
    assert np.all(np.abs(state[:, [0, 2]]) <= 1.0) and np.all(state[:, 1] == 0.0)
    assert not np.array_equal(SimpleSpread(3, seed=1, N=2).get_state(), env.get_state())
    rng = np.random.default_rng(0)
    returns = np.zeros(3)
    for t in range(14):
        _, rewards, terminated, truncated = env.step({"agents": rng.integers(0, 5, (3, 2))})
        returns += rewards["agents"].astype(np.float64).mean(1)
        np.testing.assert_array_equal(truncated, float(t in (6, 13)))
        np.testing.assert_array_equal(terminated, 0.0)
        if t == 6:
            m = env.metrics()
            assert m["episodes"] == 3 and m["episode_length"] == 7
            assert m["episode_return"] == pytest.approx(returns.mean(), rel=1e-6)
            assert m["episode_return/agents"] == m["episode_return"]
    assert env.get_elapsed().tolist() == [0, 0, 0]


def test_registry_spaces_and_errors():
    assert msrl.envs.backends("simple_spread_v3") == ["numpy", "pettingzoo", "torch"]
    described = msrl.envs.spec("simple_spread_v3", N=4)
    assert described.num_agents == 4 and list(described.groups) == ["agents"]
    assert described.observation_space["agents"].shape == (24,) and described.action_space["agents"] == msrl.Discrete(5)
    env = msrl.envs.make("simple_spread_v3", 2, seed=0)
    assert isinstance(env, SimpleSpread) and env.observe()["agents"].shape == (2, 3, 18)
    assert env.observe()["agents"][..., 10:14].any() and not env.observe()["agents"][..., 14:].any()  # comm: zeros
    with pytest.raises(msrl.EnvError, match="integers in \\[0, 4\\]"):
        env.step({"agents": np.full((2, 3), 5)})
    for kwargs, match in (
        ({"N": 0}, "N >= 1"),
        ({"local_ratio": 1.5}, "local_ratio"),
        ({"max_cycles": 0}, "max_cycles"),
    ):
        with pytest.raises(msrl.ConfigError, match=match):
            SimpleSpread(1, **kwargs)
