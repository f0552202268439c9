"""simple_spread_v3 with the MAPPO paper's fork's rules (``landmark_range``, ``shared_reward``,
``integrator``), on both backends: where an action first moves its agent, the shared reward
recomputed from the state, where landmarks are drawn, and one-line errors.  mpe2's own rules,
the default, are checked step for step against mpe2 in ``test_env_simple_spread.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import msrl
import msrl.envs

SPREAD = str(Path(__file__).resolve().parents[2] / "configs" / "mappo_simple_spread.yaml")
FORK = {"landmark_range": 0.8, "shared_reward": True, "integrator": "semi-implicit"}
BACKENDS = [("numpy", {}), ("torch", {"device": "cpu", "dtype": torch.float64})]


def _make(num_envs: int, backend: str, options: dict, seed: int = 0, **rules):
    return msrl.envs.make("simple_spread_v3", num_envs, seed=seed, backend=backend, **options, **rules)


def _native(backend: str, array: np.ndarray):
    """``array`` as the backend takes it: a tensor for torch."""
    return torch.as_tensor(array) if backend == "torch" else array


def _planes(env) -> np.ndarray:
    """The state as ``[env, (positions, velocities, landmarks), agent, xy]``, float64."""
    state = np.asarray(torch.as_tensor(env.get_state()).numpy(), dtype=np.float64)
    return state.reshape(state.shape[0], 3, -1, 2)


@pytest.mark.parametrize(("backend", "options"), BACKENDS)
@pytest.mark.parametrize("integrator", ["explicit", "semi-implicit"])
def test_where_an_action_first_moves_its_agent(backend: str, options: dict, integrator: str) -> None:
    """From rest, agent 0 pushes right (action 2: 5 units of force) for one step, then idles.
    Explicit Euler (mpe2) moves the position with the velocity from before the step, so the agent
    first moves a step later; semi-implicit (the fork) moves it in the same step."""
    env = _make(1, backend, options, integrator=integrator)
    start = _planes(env)
    start[0, 0] = [[-0.9, 0.0], [0.0, 0.5], [0.9, 0.0]]  # far apart: no contact forces
    start[0, 1] = 0.0
    env.set_state(_native(backend, start.reshape(1, -1)))
    moves = []
    for action in (2, 0):
        actions = np.array([[action, 0, 0]])
        env.step({"agents": _native(backend, actions)})
        planes = _planes(env)
        moves.append((planes[0, 0, 0, 0] + 0.9, planes[0, 1, 0, 0]))  # agent 0's x shift and x velocity
    # velocity after the push 5 * 0.1 = 0.5, then 0.5 * 0.75 = 0.375, the same under both
    expected = {"explicit": [(0.0, 0.5), (0.05, 0.375)], "semi-implicit": [(0.05, 0.5), (0.0875, 0.375)]}
    np.testing.assert_allclose(moves, expected[integrator], rtol=0, atol=1e-12)


@pytest.mark.parametrize(("backend", "options"), BACKENDS)
def test_the_shared_reward_is_the_forks_sum_over_agents(backend: str, options: dict) -> None:
    """Every agent gets ``N g - N - sum_i c_i``, recomputed here from the state after each step,
    with the agents crowded so that collisions happen."""
    num_envs, n = 32, 3
    env = _make(num_envs, backend, options, seed=1, **FORK)
    start = _planes(env)
    start[: num_envs // 2, 0] *= 0.2  # half the environments crowded: discs of radius 0.15 overlap
    env.set_state(_native(backend, start.reshape(num_envs, -1)))
    rng = np.random.default_rng(0)
    collided = 0
    for _ in range(20):  # inside the 25-step episode: the state read back is the one rewarded
        actions = rng.integers(0, 5, (num_envs, n))
        _, rewards, _, _ = env.step({"agents": _native(backend, actions)})
        reward = np.asarray(torch.as_tensor(rewards["agents"]).numpy())
        planes = _planes(env)
        pos, landmarks = planes[:, 0], planes[:, 2]
        nearest = np.linalg.norm(pos[:, :, None] - landmarks[:, None], axis=-1).min(1)  # [env, landmark]
        apart = np.linalg.norm(pos[:, :, None] - pos[:, None], axis=-1)
        collisions = (apart < 0.3).sum((1, 2)) - n  # ordered pairs i != j: sum_i c_i
        collided += int((collisions > 0).sum())
        expected = n * -nearest.sum(1) - n - collisions
        np.testing.assert_allclose(reward, np.repeat(expected[:, None], n, 1), rtol=1e-6, atol=1e-5)
    assert collided >= 10, collided


@pytest.mark.parametrize(("backend", "options"), BACKENDS)
def test_landmarks_are_drawn_within_landmark_range(backend: str, options: dict) -> None:
    env = _make(4000, backend, options, seed=2, landmark_range=0.8)
    planes = _planes(env)
    agents, landmarks = np.abs(planes[:, 0]), np.abs(planes[:, 2])
    assert landmarks.max() < 0.8 and landmarks.max() > 0.79
    assert landmarks.mean() == pytest.approx(0.4, abs=0.01)  # uniform on [-0.8, 0.8)
    assert agents.max() > 0.99 and agents.mean() == pytest.approx(0.5, abs=0.01)  # agents: mpe2's [-1, 1)


@pytest.mark.parametrize(
    ("rules", "match"),
    [
        ({"integrator": "rk4"}, "^unknown simple_spread_v3 integrator 'rk4'; valid choices: explicit, semi-implicit$"),
        ({"landmark_range": 0.0}, "landmark_range must be positive and finite, got 0.0"),
        ({"landmark_range": float("nan")}, "landmark_range must be positive and finite"),
        ({"landmark_range": "far"}, "landmark_range must be a number, got 'far'"),
        ({"shared_reward": "yes"}, "shared_reward must be true or false, got 'yes'"),
    ],
)
def test_a_bad_rule_is_one_config_error(rules: dict, match: str) -> None:
    with pytest.raises(msrl.ConfigError, match=match):
        msrl.envs.make("simple_spread_v3", 1, **rules)


def test_the_rules_reach_the_env_from_a_config(tmp_path: Path) -> None:
    """Through ``algo.env_kwargs``: a bad rule in a MAPPO run's overrides stops it before anything
    is written."""
    with pytest.raises(msrl.ConfigError, match="^unknown simple_spread_v3 integrator 'leapfrog'; valid choices"):
        msrl.train(SPREAD, [f"runs_dir={tmp_path}", "algo.env_kwargs.integrator=leapfrog"])
    assert not any(tmp_path.iterdir())
