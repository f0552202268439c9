"""Any PettingZoo parallel env is an msrl multi-agent env: groups from the agent names,
dict values per group, same-step autoreset, dropped agents, episode metrics, seeding,
checkpoints that restart episodes reproducibly, and one-line errors.  mpe2's envs are
checked against copies of themselves stepped by hand; the rest on a toy env."""

from __future__ import annotations

import io
import sys
import types

import numpy as np
import pytest
import torch

import msrl
import msrl.envs
from msrl import ConfigError

pettingzoo = pytest.importorskip("pettingzoo")
from gymnasium import spaces  # noqa: E402 - pettingzoo brings gymnasium

from msrl.envs import PettingZooEnv, group_of  # noqa: E402


class Relay(pettingzoo.ParallelEnv):
    """Two runners and a chaser.  Runner ``k`` sees ``[t, k]`` and is paid the action it
    receives (``Discrete(3, start=1)``); the chaser sees ``t`` (``Discrete(9, start=2)``)
    and is paid the sum of its ``Box`` action.  With ``leave``, runner_1 terminates at
    ``t == 2``; at ``t == limit`` everyone left terminates or truncates (``end``)."""

    metadata = {"name": "relay_v0"}

    def __init__(
        self, limit: int = 4, leave: bool = True, end: str = "truncate", chaser_actions=None, runner_1_obs=None
    ) -> None:
        self.limit, self.leave, self.end = limit, leave, end
        self.possible_agents = ["runner_0", "runner_1", "chaser_0"]
        runner_obs = spaces.Box(-10.0, 10.0, (2,), np.float32)
        self._obs = {
            "runner_0": runner_obs,
            "runner_1": runner_1_obs or runner_obs,
            "chaser_0": spaces.Discrete(9, start=2),
        }
        self._act = {
            "runner_0": spaces.Discrete(3, start=1),
            "runner_1": spaces.Discrete(3, start=1),
            "chaser_0": chaser_actions or spaces.Box(-1.0, 1.0, (2,), np.float64),
        }
        self.seeds, self.received, self.closed = [], [], False

    def observation_space(self, agent):
        return self._obs[agent]

    def action_space(self, agent):
        return self._act[agent]

    def _observe(self):
        return {a: (self.t + 2 if a == "chaser_0" else np.array([self.t, int(a[-1])], np.float32)) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.seeds.append(seed)
        self.agents, self.t = self.possible_agents[:], 0
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)  # never an action for a dropped agent
        self.received.append(actions)
        self.t += 1
        rewards = {a: float(np.sum(actions[a])) for a in self.agents}
        done = self.t == self.limit
        terminated = {
            a: (done and self.end == "terminate") or (self.leave and a == "runner_1" and self.t == 2)
            for a in self.agents
        }
        truncated = {a: done and self.end == "truncate" for a in self.agents}
        obs = self._observe()
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def close(self):
        self.closed = True


def _actions(num_envs: int, runner: int = 0, chaser: float = 0.25) -> dict:
    return {"runner": np.full((num_envs, 2), runner), "chaser": np.full((num_envs, 1, 2), chaser)}


def test_group_names():
    assert [group_of(a) for a in ("adversary_0", "agent_12", "agent", "my_team_3", "x_")] == [
        "adversary",
        "agent",
        "agent",
        "my_team",
        "x_",
    ]


def test_simple_tag_groups_and_steps_match_mpe2():
    """Copy i of ours against mpe2's simple_tag seeded seed + i, over three 25-step episodes:
    same observations, rewards and truncation; after an episode, the next one's first obs
    (the copy's own unseeded reset)."""
    simple_tag_v3 = pytest.importorskip("mpe2.simple_tag_v3")
    n, seed = 3, 5
    env = msrl.envs.make("pettingzoo:mpe2.simple_tag_v3", n, seed=seed)
    assert isinstance(env, PettingZooEnv) and env.spec.backend == "pettingzoo"
    assert {name: g.num_agents for name, g in env.groups.items()} == {"adversary": 3, "agent": 1}
    assert env.num_agents == 4 and env.action_space == {"adversary": msrl.Discrete(5), "agent": msrl.Discrete(5)}
    assert env.observation_space["adversary"].shape == (16,) and env.observation_space["agent"].shape == (14,)
    refs = [simple_tag_v3.parallel_env() for _ in range(n)]
    first = [ref.reset(seed=seed + i)[0] for i, ref in enumerate(refs)]
    obs = env.observe()
    for i in range(len(refs)):
        np.testing.assert_array_equal(obs["adversary"][i], np.stack([first[i][f"adversary_{k}"] for k in range(3)]))
        np.testing.assert_array_equal(obs["agent"][i, 0], first[i]["agent_0"])
    rng = np.random.default_rng(0)
    for t in range(60):
        actions = {"adversary": rng.integers(0, 5, (n, 3)), "agent": rng.integers(0, 5, (n, 1))}
        obs, rewards, terminated, truncated = env.step(actions)
        assert obs["adversary"].shape == (n, 3, 16) and obs["agent"].dtype == np.float32
        assert rewards["adversary"].shape == (n, 3) and rewards["agent"].dtype == np.float32
        ends = (t + 1) % 25 == 0
        np.testing.assert_array_equal(truncated, float(ends))
        np.testing.assert_array_equal(terminated, 0.0)
        for i, ref in enumerate(refs):
            r_obs, r_rew, _, r_trunc, _ = ref.step(
                {**{f"adversary_{k}": actions["adversary"][i, k] for k in range(3)}, "agent_0": actions["agent"][i, 0]}
            )
            assert all(r_trunc.values()) == ends
            expected = [np.float32(r_rew[f"adversary_{k}"]) for k in range(3)]
            np.testing.assert_array_equal(rewards["adversary"][i], expected)
            assert rewards["agent"][i, 0] == np.float32(r_rew["agent_0"])
            if ends:
                r_obs = ref.reset()[0]
            np.testing.assert_array_equal(obs["agent"][i, 0], r_obs["agent_0"])
            np.testing.assert_array_equal(obs["adversary"][i, 2], r_obs["adversary_2"])
    env.close()


def test_simple_spread_backend_keeps_msrl_group_and_counts_episodes():
    pytest.importorskip("mpe2.simple_spread_v3")
    env = msrl.envs.make("simple_spread_v3", 2, seed=0, backend="pettingzoo", N=4)
    own = msrl.envs.make("simple_spread_v3", 2, seed=0, N=4)
    assert list(env.groups) == list(own.groups) == ["agents"] and env.num_agents == 4
    assert env.observation_space["agents"].shape == own.observation_space["agents"].shape == (24,)
    rng = np.random.default_rng(0)
    returns = np.zeros((2, 4))
    for t in range(25):
        _, rewards, _, truncated = env.step({"agents": rng.integers(0, 5, (2, 4))})
        returns += rewards["agents"]
        assert truncated.tolist() == [float(t == 24)] * 2
    m = env.metrics()
    assert m["episodes"] == 2 and m["episode_length"] == 25
    assert m["episode_return"] == pytest.approx(returns.mean(), rel=1e-6) == m["episode_return/agents"]
    assert env.metrics() == {}
    env.close()


def test_box_actions_are_clipped_to_their_bounds_before_pettingzoo_sees_them(caplog):
    """A Gaussian policy's samples fall outside [0, 1]: stepped as they are, every step would make
    PettingZoo log that it clips them; msrl clips them first, so the steps are those of the clipped
    actions and PettingZoo logs nothing."""
    pytest.importorskip("mpe2.simple_spread_v3")
    wild_env, tame_env = (
        msrl.envs.make("pettingzoo:mpe2.simple_spread_v3", 2, seed=0, continuous_actions=True) for _ in range(2)
    )
    (group,) = wild_env.groups  # agent_0..agent_2: group "agent"
    space = wild_env.action_space[group]
    assert np.all(np.asarray(space.low) == 0.0) and np.all(np.asarray(space.high) == 1.0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        wild = rng.normal(0.5, 3.0, (2, 3, *space.shape)).astype(np.float32)
        obs, rewards, _, _ = wild_env.step({group: wild})
        tame_obs, tame_rewards, _, _ = tame_env.step({group: np.clip(wild, 0.0, 1.0)})
        np.testing.assert_array_equal(obs[group], tame_obs[group])
        np.testing.assert_array_equal(rewards[group], tame_rewards[group])
    assert not [record for record in caplog.records if "outside action space" in record.getMessage()]
    wild_env.close()
    tame_env.close()


@pytest.mark.parametrize(
    "leave, end, flags",
    [(True, "truncate", (0.0, 1.0)), (True, "terminate", (1.0, 0.0)), (False, "truncate", (0.0, 1.0))],
)
def test_dropped_agents_autoreset_and_flags(leave: bool, end: str, flags: tuple):
    """A dropped agent keeps its slot (reward 0, zero obs, no action sent); the episode ends,
    and restarts in the same step, when nobody is left: terminated only if all terminated."""
    env = PettingZooEnv(Relay, 2, seed=0, leave=leave, end=end)
    assert {name: g.num_agents for name, g in env.groups.items()} == {"runner": 2, "chaser": 1}
    assert env.observation_space["chaser"] == msrl.Discrete(9) and env.action_space["runner"] == msrl.Discrete(3)
    obs = env.observe()
    assert obs["chaser"].dtype == np.int64 and obs["chaser"].tolist() == [[0], [0]]  # Discrete(start=2): index 0
    assert {k: v.tolist() for k, v in env.active().items()} == {"runner": [[1.0, 1.0]] * 2, "chaser": [[1.0]] * 2}
    for t in range(1, 5):
        obs, rewards, terminated, truncated = env.step(_actions(2, runner=1))
        gone = leave and t > 2
        active = env.active()  # runner_1 out once it left, everyone back in the next episode
        assert active["runner"].dtype == np.float32
        assert active["runner"].tolist() == [[1.0, 0.0 if leave and 2 <= t < 4 else 1.0]] * 2
        assert active["chaser"].tolist() == [[1.0]] * 2
        np.testing.assert_array_equal(rewards["runner"], [[2.0, 0.0 if gone else 2.0]] * 2)  # index 1 is action 2
        np.testing.assert_array_equal(rewards["chaser"], 0.5)
        if t < 4:
            np.testing.assert_array_equal(obs["runner"][:, 1], 0.0 if gone else [[t, 1]] * 2)
            assert obs["chaser"].tolist() == [[t]] * 2
            assert terminated.tolist() == truncated.tolist() == [0.0, 0.0]
    assert (terminated.tolist(), truncated.tolist()) == ([flags[0]] * 2, [flags[1]] * 2)
    np.testing.assert_array_equal(obs["runner"], [[[0, 0], [0, 1]]] * 2)  # the next episode's first obs
    received = env._copies[0].received
    assert received[0]["runner_0"] == 2 and type(received[0]["runner_0"]) is int
    chaser = received[0]["chaser_0"]
    assert chaser.dtype == np.float64 and chaser.shape == (2,)
    assert ("runner_1" in received[2]) == (not leave)
    m = env.metrics()
    assert m["episodes"] == 2 and m["episode_length"] == 4
    runner_return = (4 * 2.0 + (2 if leave else 4) * 2.0) / 2
    assert m["episode_return/runner"] == runner_return and m["episode_return/chaser"] == 2.0
    assert m["episode_return"] == pytest.approx((2 * runner_return + 2.0) / 3)
    copies = list(env._copies)
    env.close()
    assert all(copy.closed for copy in copies)


def test_seeding_and_checkpoints_restart_reproducibly(monkeypatch):
    """Copy i is seeded seed + i (also by reset(seed=s)); a checkpoint keeps the episode counts
    and restarts every copy from a seed derived from its seed and step count."""
    module = types.ModuleType("relay_toy_env")
    module.parallel_env = Relay
    monkeypatch.setitem(sys.modules, "relay_toy_env", module)
    env = msrl.envs.make("pettingzoo:relay_toy_env", 3, seed=4, limit=3)
    copies = list(env._copies)
    assert [c.seeds for c in copies] == [[4], [5], [6]]
    env.reset(seed=7)
    assert [c.seeds[-1] for c in copies] == [7, 8, 9]
    for _ in range(4):
        env.step(_actions(3))
    assert [c.seeds[-1] for c in copies] == [None] * 3  # autoreset continues the copy's generator
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    restored = [msrl.envs.make("pettingzoo:relay_toy_env", 3, seed=0, limit=3) for _ in range(2)]
    for other in restored:
        other.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    seeds = [[c.seeds[-1] for c in other._copies] for other in restored]
    assert seeds[0] == seeds[1] and seeds[0][1] == seeds[0][0] + 1 and seeds[0][0] not in (None, 7)
    for other in restored:
        other.step(_actions(3))
        other.step(_actions(3))
        m = other.metrics()  # the episodes finished before the checkpoint are counted, the running ones dropped
        assert m["episodes"] == 3 and m["episode_length"] == 3
    with pytest.raises(msrl.CheckpointError, match="lacks \\['group_episodes'\\]"):
        restored[0].load_state_dict({"episodes": {}, "seed": 0, "steps": 0})


def test_errors_are_one_line_config_errors():
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'.*parallel_env"):
        msrl.envs.make("pettingzoo:no_such_module_xyz", 1)
    with pytest.raises(ConfigError, match="module 'json' has no parallel_env"):
        msrl.envs.spec("pettingzoo:json")
    with pytest.raises(ConfigError, match="MultiDiscrete action space .*msrl takes Box or Discrete"):
        PettingZooEnv(Relay, 1, chaser_actions=spaces.MultiDiscrete([2, 2]))
    with pytest.raises(
        ConfigError, match="agents 'runner_0' and 'runner_1' of group 'runner' have different observation spaces"
    ):
        PettingZooEnv(Relay, 2, runner_1_obs=spaces.Box(-1.0, 1.0, (3,), np.float32))
    with pytest.raises(ConfigError, match="cannot be made with \\{'speed': 2\\}"):
        PettingZooEnv(Relay, 1, speed=2)
    env = PettingZooEnv(Relay, 2)
    with pytest.raises(msrl.EnvError, match="group 'runner' expects actions of shape \\(2, 2\\)"):
        env.step({"runner": np.zeros((2, 3), int), "chaser": np.zeros((2, 1, 2))})
    with pytest.raises(msrl.EnvError, match="integers in \\[0, 2\\]"):
        env.step(_actions(2, runner=3))
