"""Any gymnasium id is an msrl environment: vectorised, same-step autoreset,
float32 outputs, episode metrics, seeding, time-limit truncation, checkpoints
that restart episodes reproducibly, and one-line errors for what it cannot do.
Everything is checked against gymnasium's own single environments."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import msrl.envs
from msrl import Box, CheckpointError, ConfigError, Discrete, EnvError

gym = pytest.importorskip("gymnasium")


def _singles(env_id: str, n: int, seed: int, **kwargs):
    """gymnasium's own environments, seeded as its vector env seeds copy i (seed + i)."""
    envs = [gym.wrappers.RecordEpisodeStatistics(gym.make(env_id, **kwargs)) for _ in range(n)]
    first = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    return envs, np.stack(first)


def test_acrobot_spaces_shapes_and_dtypes():
    env = msrl.envs.make("Acrobot-v1", num_envs=5, seed=0)
    assert msrl.envs.backends("Acrobot-v1") == ["gymnasium"]
    assert isinstance(env.observation_space, Box) and env.observation_space.shape == (6,)
    assert env.action_space == Discrete(3)
    obs = env.reset()
    assert obs.shape == (5, 6) and obs.dtype == np.float32
    out = env.step(np.array([0, 1, 2, 1, 0]))
    for value, shape in zip(out, [(5, 6), (5,), (5,), (5,)]):
        assert value.shape == shape and value.dtype == np.float32
    np.testing.assert_array_equal(out[1], -np.ones(5, np.float32))
    np.testing.assert_array_equal(env.observe(), out[0])
    env.close()


@pytest.mark.parametrize("env_id, steps", [("CartPole-v1", 300), ("Acrobot-v1", 700)])
def test_steps_match_gymnasium_with_same_step_autoreset(env_id: str, steps: int):
    """Ours against gymnasium's single envs: outputs equal every step; where an episode
    ends, our obs is the next episode's first (the single env's reset), not the final
    obs, which gymnasium's own same-step vector env reports as ``final_obs``."""
    n, seed = 4, 3
    env = msrl.envs.make(env_id, n, seed=seed, backend="gymnasium")
    reference = gym.make_vec(
        env_id, n, vectorization_mode="sync", vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    )
    reference.reset(seed=seed)
    singles, first = _singles(env_id, n, seed)
    np.testing.assert_array_equal(env.observe(), first.astype(np.float32))
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(steps):
        action = rng.integers(0, env.action_space.n, n)
        obs, reward, terminated, truncated = env.step(action)
        _, _, _, _, info = reference.step(action)
        for i, single in enumerate(singles):
            s_obs, s_reward, s_term, s_trunc, _ = single.step(int(action[i]))
            assert (reward[i], terminated[i], truncated[i]) == (np.float32(s_reward), float(s_term), float(s_trunc))
            if s_term or s_trunc:
                ends += 1
                np.testing.assert_array_equal(info["final_obs"][i], s_obs)  # the episode's last obs...
                next_first = single.reset()[0]
                np.testing.assert_array_equal(obs[i], next_first.astype(np.float32))  # ...is not what we return
                assert not np.array_equal(obs[i], s_obs.astype(np.float32))
            else:
                np.testing.assert_array_equal(obs[i], s_obs.astype(np.float32))
    assert ends >= 4
    env.close()
    reference.close()


def test_metrics_match_record_episode_statistics():
    n, seed = 6, 1
    env = msrl.envs.make("CartPole-v1", n, seed=seed, backend="gymnasium")
    singles, _ = _singles("CartPole-v1", n, seed)
    rng = np.random.default_rng(1)
    returns, lengths = [], []
    for step in range(1, 201):
        action = rng.integers(0, 2, n)
        env.step(action)
        for i, single in enumerate(singles):
            _, _, term, trunc, info = single.step(int(action[i]))
            if term or trunc:
                returns.append(float(info["episode"]["r"]))
                lengths.append(int(info["episode"]["l"]))
                single.reset()
        if step in (120, 200):
            metrics = env.metrics()
            assert metrics["episodes"] == len(returns) > 0
            assert metrics["episode_return"] == pytest.approx(np.mean(returns), rel=1e-12)
            assert metrics["episode_length"] == pytest.approx(np.mean(lengths), rel=1e-12)
            returns, lengths = [], []
    assert env.metrics() == {}


def test_seeding_is_reproducible():
    def rollout(env, steps=60):
        rng = np.random.default_rng(0)
        out = [env.observe()]
        for _ in range(steps):
            out.extend(env.step(rng.integers(0, 3, env.num_envs)))
        return out

    a, b, c = (msrl.envs.make("Acrobot-v1", 3, seed=s) for s in (7, 7, 8))
    ra, rb, rc = rollout(a), rollout(b), rollout(c)
    assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
    assert not np.array_equal(ra[0], rc[0])
    np.testing.assert_array_equal(c.reset(seed=7), ra[0])  # reset(seed=s) equals a fresh env seeded s
    assert all(np.array_equal(x, y) for x, y in zip(rollout(c), ra))


def test_truncation_at_the_time_limit():
    """Pendulum never terminates: gymnasium's TimeLimit truncates every 200 steps, and a
    ``max_episode_steps`` keyword goes through to gymnasium.make."""
    env = msrl.envs.make("Pendulum-v1", 3, seed=0, backend="gymnasium")
    assert env.action_space == Box(low=-2.0, high=2.0, shape=(1,), dtype="float32")
    for t in range(1, 401):
        _, reward, terminated, truncated = env.step(np.zeros((3, 1), np.float32))
        assert not terminated.any() and reward.dtype == np.float32
        assert truncated.all() == (t % 200 == 0) and truncated.any() == (t % 200 == 0)
    assert env.metrics()["episodes"] == 6 and env.metrics() == {}
    short = msrl.envs.make("Acrobot-v1", 2, seed=0, max_episode_steps=10)
    flags = [short.step(np.zeros(2, np.int64))[3] for _ in range(10)]
    assert [f.all() for f in flags] == [False] * 9 + [True]


def test_actions_are_checked_like_the_built_in_envs():
    cartpole = msrl.envs.make("CartPole-v1", 4, backend="gymnasium")
    with pytest.raises(EnvError, match=r"shape \(4,\)"):
        cartpole.step(np.zeros(3, np.int64))
    with pytest.raises(EnvError, match="0 or 1"):
        cartpole.step(np.array([0, 2, 1, 0]))
    pendulum = msrl.envs.make("Pendulum-v1", 2, backend="gymnasium")
    pendulum.step(np.array([0.5, -0.5], np.float32))  # (n,) for a (1,) space, like the built-ins
    with pytest.raises(EnvError, match="finite"):
        pendulum.step(np.array([[np.nan], [0.0]], np.float32))
    continuous = msrl.envs.make("MountainCarContinuous-v0", 2)
    assert continuous.action_space.shape == (1,) and continuous.step(np.ones((2, 1)))[0].shape == (2, 2)


def test_box_actions_are_clipped_to_the_bounds_before_gymnasium_sees_them():
    """MountainCarContinuous charges 0.1 * action**2 on the action it is given, as MuJoCo's
    control cost does: an out-of-bounds sample must cost what the bound costs (CleanRL's
    ClipAction, SB3's rollout clip), not nine times more."""
    rewards = {}
    for name, value in (("outside", 3.0), ("bound", 1.0)):
        env = msrl.envs.make("MountainCarContinuous-v0", 2, seed=0, backend="gymnasium")
        obs, rewards[name], _, _ = env.step(np.array([[value], [-value]], np.float32))
        rewards[name + "_obs"] = obs
        env.close()
    np.testing.assert_array_equal(rewards["outside"], rewards["bound"])
    np.testing.assert_array_equal(rewards["outside_obs"], rewards["bound_obs"])
    assert rewards["bound"][0] == pytest.approx(-0.1, abs=1e-6)


def test_checkpoint_restarts_episodes_reproducibly():
    env = msrl.envs.make("CartPole-v1", 4, seed=2, backend="gymnasium")
    rng = np.random.default_rng(2)
    for _ in range(50):
        env.step(rng.integers(0, 2, 4))
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    finished_before = env.metrics()["episodes"]
    restored = []
    for _ in range(2):  # two resumes of one checkpoint continue identically
        other = msrl.envs.make("CartPole-v1", 4, seed=99, backend="gymnasium")
        other.load_state_dict(saved)
        actions = np.random.default_rng(5).integers(0, 2, (30, 4))
        restored.append([other.observe()] + [v for a in actions for v in other.step(a)])
        assert other.metrics()["episodes"] >= finished_before  # the unreported episodes survive
    assert all(np.array_equal(x, y) for x, y in zip(*restored))
    assert np.abs(restored[0][0]).max() <= 0.05  # every episode restarted
    with pytest.raises(CheckpointError, match="lacks"):
        env.load_state_dict({"episodes": saved["episodes"]})


def test_unsupported_spaces_and_unknown_ids_are_one_line_errors():
    with pytest.raises(ConfigError, match="Tuple observation space") as info:
        msrl.envs.make("Blackjack-v1", 2)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="close matches: CartPole-v1") as info:
        msrl.envs.make("CartPol-v1", 4)
    message = str(info.value)
    matches = message.split("close matches: ")[1].split(", ")
    assert "\n" not in message and len(matches) == len(set(matches))  # msrl's and gymnasium's CartPole once


def test_spec_of_a_gymnasium_id_needs_no_batch():
    spec = msrl.envs.spec("MountainCarContinuous-v0")
    assert spec.backend == "gymnasium" and spec.observation_space.shape == (2,)
    assert isinstance(spec.action_space, Box) and spec.action_space.shape == (1,)
