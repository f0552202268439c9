"""What ``benchmarks.learning_quality`` compares: each msrl config's SB3 peer and rl-zoo entry (``SPECS``), the
'solved' thresholds, rl-zoo's hyper-parameters copied entry by entry, and the published figures
the table cites.  Data only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from benchmarks.harness import REPO

CONFIG_DIR = REPO / "configs"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "learning"
EVAL_SEED_OFFSET = 7919
"""Evaluation environments are seeded ``seed + 7919``, as msrl seeds its final evaluation."""
FRAMEWORKS = ("msrl", "sb3")


# -- what is compared -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """One benchmark: an msrl config and its SB3 peer with rl-zoo's entry for the env."""

    env_id: str
    msrl_algo: str
    sb3_algo: str  # class name in stable_baselines3
    zoo_file: str  # hyperparams/<zoo_file> in rl-baselines3-zoo
    zoo_env: str  # the entry's key in that file
    note: str = ""

    @property
    def settings_source(self) -> str:
        """Whose hyper-parameters SB3 is given: rl-zoo's entry, or a CleanRL script's defaults."""
        return "CleanRL" if self.zoo_file.startswith("cleanrl/") else "rl-zoo"


SPECS: dict[str, Spec] = {
    "a2c_cartpole": Spec("CartPole-v1", "a2c", "A2C", "a2c.yml", "CartPole-v1"),
    "dqn_cartpole": Spec(
        "CartPole-v1",
        "dqn",
        "DQN",
        "cleanrl/dqn.py",
        "CartPole-v1 at CleanRL dqn.py's settings",
        note="SB3's DQN at CleanRL dqn.py's settings, as the msrl config carries them, its TD loss the squared "
        "error (SB3 has Huber only: with it, SB3 collapsed to a greedy 9.4 on 5/5 seeds at 500k)",
    ),
    "ppo_cartpole": Spec("CartPole-v1", "ppo", "PPO", "ppo.yml", "CartPole-v1"),
    "ppo_pendulum": Spec("Pendulum-v1", "ppo", "PPO", "ppo.yml", "Pendulum-v1"),
    "sac_pendulum": Spec("Pendulum-v1", "sac", "SAC", "sac.yml", "Pendulum-v1"),
    "td3_pendulum": Spec("Pendulum-v1", "td3", "TD3", "td3.yml", "Pendulum-v1"),
    "ddpg_pendulum": Spec("Pendulum-v1", "ddpg", "DDPG", "ddpg.yml", "Pendulum-v1"),
    "impala_cartpole": Spec(
        "CartPole-v1",
        "impala",
        "A2C",
        "a2c.yml",
        "CartPole-v1",
        note="IMPALA has no SB3 counterpart: its peer is SB3's A2C with rl-zoo's CartPole-v1 hyper-parameters",
    ),
    "apex_dqn_cartpole": Spec(
        "CartPole-v1",
        "apex_dqn",
        "DQN",
        "cleanrl/dqn.py",
        "CartPole-v1 at CleanRL dqn.py's settings",
        note="neither SB3 nor CleanRL has Ape-X: its peer is SB3's DQN at CleanRL dqn.py's settings, which the "
        "config shares",
    ),
    "a3c_cartpole": Spec(
        "CartPole-v1",
        "a3c",
        "A2C",
        "a2c.yml",
        "CartPole-v1",
        note="neither SB3 nor CleanRL has A3C: its peer is SB3's A2C with rl-zoo's CartPole-v1 settings, "
        "which the config shares",
    ),
    "pg_cartpole": Spec(
        "CartPole-v1",
        "pg",
        "A2C",
        "a2c.yml",
        "CartPole-v1",
        note="neither SB3 nor CleanRL has REINFORCE: its peer is SB3's A2C with rl-zoo's CartPole-v1 settings",
    ),
    "ac_cartpole": Spec(
        "CartPole-v1",
        "ac",
        "A2C",
        "a2c.yml",
        "CartPole-v1",
        note="neither SB3 nor CleanRL has the one-step actor-critic: its peer is SB3's A2C with rl-zoo's "
        "CartPole-v1 settings",
    ),
    "gail_cartpole": Spec(
        "CartPole-v1",
        "gail",
        "PPO",
        "ppo.yml",
        "CartPole-v1",
        note="GAIL imitates demonstrations (--set algo.demonstrations=DIR, msrl record of an expert); SB3 has no "
        "GAIL: its peer is SB3's PPO with rl-zoo's CartPole-v1 settings, trained on the environment's reward",
    ),
    "ppo_halfcheetah": Spec(
        "HalfCheetah-v5",
        "ppo",
        "PPO",
        "ppo.yml",
        "HalfCheetah-v4",
        note="rl-zoo's entry is for HalfCheetah-v4; run on v5",
    ),
    "sac_halfcheetah": Spec(
        "HalfCheetah-v5",
        "sac",
        "SAC",
        "sac.yml",
        "HalfCheetah-v4",
        note="rl-zoo's entry is for HalfCheetah-v4; run on v5",
    ),
}

THRESHOLDS: dict[str, float] = {"CartPole-v1": 475.0, "Pendulum-v1": -250.0, "HalfCheetah-v5": 3000.0}
"""'Solved' levels for the rolling mean of the last 10 training episode returns."""


class Linear:
    """rl-zoo's ``lin_<x>`` schedule (rl_zoo3.utils.SimpleLinearSchedule): ``x * progress_remaining``,
    from x at the start of ``learn`` down to 0 at its ``total_timesteps``."""

    def __init__(self, initial: float) -> None:
        self.initial = float(initial)

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial

    def __repr__(self) -> str:
        return f"lin_{self.initial:g}"


# rl-baselines3-zoo, hyperparams/{a2c,dqn,ppo,sac}.yml at commit 22e3ff2450fd92033f7f032915e1f64894a09584
# (https://github.com/DLR-RM/rl-baselines3-zoo/tree/22e3ff2450fd92033f7f032915e1f64894a09584/hyperparams),
# copied entry by entry.  rl-zoo's preprocessing is written out: "lin_x" strings are Linear(x),
# policy_kwargs strings are Python objects, and the keys that are not model arguments are handled by
# make_sb3_model: n_envs (make_vec_env), normalize (VecNormalize, with the algorithm's gamma when the
# entry sets one, as rl-zoo does), n_timesteps (kept for reference only: the budget replaces it).
# Everything else (use_sde, sde_sample_freq, use_rms_prop, ...) is passed to the model as it is.
_PENDULUM_TD3_DDPG: dict[str, Any] = dict(
    n_timesteps=20_000,
    policy="MlpPolicy",
    gamma=0.98,
    buffer_size=200_000,
    learning_starts=10_000,
    noise_type="normal",
    noise_std=0.1,
    gradient_steps=-1,
    train_freq=(1, "episode"),
    learning_rate=1e-3,
    policy_kwargs=dict(net_arch=[400, 300]),
)
"""hyperparams/td3.yml's and ddpg.yml's Pendulum entries, which are the same (below)."""
ZOO_HYPERPARAMS: dict[tuple[str, str], dict[str, Any]] = {
    # hyperparams/a2c.yml, CartPole-v1
    ("a2c.yml", "CartPole-v1"): dict(n_envs=8, n_timesteps=5e5, policy="MlpPolicy", ent_coef=0.0),
    # hyperparams/dqn.yml, CartPole-v1 ("Almost Tuned")
    ("dqn.yml", "CartPole-v1"): dict(
        n_timesteps=5e4,
        policy="MlpPolicy",
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[256, 256]),
    ),
    # Not rl-zoo: CleanRL's cleanrl/dqn.py defaults (its CartPole-v1 benchmark, 500k steps) as SB3
    # DQN arguments, for configs/dqn_cartpole.yaml, which carries them with the same change: 10
    # envs stepped 10 times, then 10 gradient steps (CleanRL: 1 env, 1 gradient step every 10
    # steps).  Both count target_update_interval in env steps; max_grad_norm inf: CleanRL clips
    # nothing.
    ("cleanrl/dqn.py", "CartPole-v1 at CleanRL dqn.py's settings"): dict(
        n_timesteps=5e5,
        policy="MlpPolicy",
        learning_rate=2.5e-4,
        buffer_size=10_000,
        learning_starts=10_000,
        batch_size=128,
        tau=1.0,
        gamma=0.99,
        n_envs=10,
        train_freq=10,
        gradient_steps=10,
        target_update_interval=500,
        exploration_fraction=0.5,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.05,
        max_grad_norm=float("inf"),
        policy_kwargs=dict(net_arch=[120, 84]),
        td_loss="mse",  # not an SB3 argument: make_sb3_model swaps SB3's Huber loss for CleanRL's squared error
    ),
    # hyperparams/ppo.yml, CartPole-v1 ("Tuned")
    ("ppo.yml", "CartPole-v1"): dict(
        n_envs=8,
        n_timesteps=1e5,
        policy="MlpPolicy",
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=Linear(0.001),
        clip_range=Linear(0.2),
    ),
    # hyperparams/ppo.yml, Pendulum-v1 ("Tuned")
    ("ppo.yml", "Pendulum-v1"): dict(
        n_envs=4,
        n_timesteps=1e5,
        policy="MlpPolicy",
        n_steps=1024,
        gae_lambda=0.95,
        gamma=0.9,
        n_epochs=10,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        use_sde=True,
        sde_sample_freq=4,
    ),
    # hyperparams/sac.yml, Pendulum-v1
    ("sac.yml", "Pendulum-v1"): dict(n_timesteps=20_000, policy="MlpPolicy", learning_rate=1e-3),
    # hyperparams/td3.yml and ddpg.yml, Pendulum (read at commits a02f4fbf and 1159e284, where the entry
    # is keyed Pendulum-v0; its values as rl-zoo's benchmark table's Pendulum-v1 agents were trained):
    # noise_type/noise_std become NormalActionNoise as rl-zoo's ExpManager makes it (make_sb3_model),
    # train_freq [1, "episode"] is the tuple SB3 takes
    ("td3.yml", "Pendulum-v1"): _PENDULUM_TD3_DDPG,
    ("ddpg.yml", "Pendulum-v1"): _PENDULUM_TD3_DDPG,
    # hyperparams/ppo.yml, HalfCheetah-v4 ("Tuned")
    ("ppo.yml", "HalfCheetah-v4"): dict(
        normalize=True,
        n_envs=1,
        policy="MlpPolicy",
        n_timesteps=1e6,
        batch_size=64,
        n_steps=512,
        gamma=0.98,
        learning_rate=2.0633e-05,
        ent_coef=0.000401762,
        clip_range=0.1,
        n_epochs=20,
        gae_lambda=0.92,
        max_grad_norm=0.8,
        vf_coef=0.58096,
        policy_kwargs=dict(
            log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[256, 256], vf=[256, 256])
        ),
    ),
    # hyperparams/sac.yml, HalfCheetah-v4 (&mujoco-defaults)
    ("sac.yml", "HalfCheetah-v4"): dict(n_timesteps=1e6, policy="MlpPolicy", learning_starts=10_000),
}

RL_ZOO_BENCHMARK = (
    "https://github.com/DLR-RM/rl-baselines3-zoo/blob/22e3ff2450fd92033f7f032915e1f64894a09584/benchmark.md"
)


@dataclass(frozen=True)
class Published:
    source: str
    figure: str  # mean ± std as the source states it, or "n/a"
    budget: str  # env steps of training behind the figure
    url: str
    note: str = ""


_ZOO_NOTE = "one trained agent, deterministic evaluation, std over evaluation episodes"
_CLEANRL_NOTE = "mean ± std over 3 seeds of the training episodic return"
PUBLISHED: dict[str, list[Published]] = {
    "a2c_cartpole": [
        Published("rl-zoo SB3 A2C CartPole-v1", "500.000 ± 0.000", "500k", RL_ZOO_BENCHMARK, _ZOO_NOTE),
        Published("CleanRL", "n/a", "", "https://docs.cleanrl.dev/rl-algorithms/overview/", "CleanRL has no A2C"),
    ],
    "dqn_cartpole": [
        Published("rl-zoo SB3 DQN CartPole-v1", "500.000 ± 0.000", "50k", RL_ZOO_BENCHMARK, _ZOO_NOTE),
        Published(
            "CleanRL dqn.py CartPole-v1",
            "488.69 ± 16.11",
            "500k",
            "https://docs.cleanrl.dev/rl-algorithms/dqn/#dqnpy",
            _CLEANRL_NOTE,
        ),
    ],
    "ppo_cartpole": [
        Published("rl-zoo SB3 PPO CartPole-v1", "500.000 ± 0.000", "100k", RL_ZOO_BENCHMARK, _ZOO_NOTE),
        Published(
            "CleanRL ppo.py CartPole-v1",
            "490.04 ± 6.12",
            "500k",
            "https://docs.cleanrl.dev/rl-algorithms/ppo/#ppopy",
            _CLEANRL_NOTE,
        ),
    ],
    "ppo_pendulum": [
        Published("rl-zoo SB3 PPO Pendulum-v1", "-172.225 ± 104.159", "100k", RL_ZOO_BENCHMARK, _ZOO_NOTE),
        Published(
            "CleanRL",
            "n/a",
            "",
            "https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_continuous_actionpy",
            "no Pendulum-v1 figure",
        ),
    ],
    "sac_pendulum": [
        Published("rl-zoo SB3 SAC Pendulum-v1", "-156.995 ± 88.714", "20k", RL_ZOO_BENCHMARK, _ZOO_NOTE),
        Published(
            "CleanRL",
            "n/a",
            "",
            "https://docs.cleanrl.dev/rl-algorithms/sac/#sac_continuous_actionpy",
            "no Pendulum-v1 figure",
        ),
    ],
    "td3_pendulum": [
        Published("rl-zoo SB3 TD3 Pendulum-v1", "-151.855 ± 90.227", "20k", RL_ZOO_BENCHMARK, _ZOO_NOTE),
        Published(
            "CleanRL",
            "n/a",
            "",
            "https://docs.cleanrl.dev/rl-algorithms/td3/#td3_continuous_actionpy",
            "no Pendulum-v1 figure",
        ),
    ],
    "ddpg_pendulum": [
        Published("rl-zoo SB3 DDPG Pendulum-v1", "-152.099 ± 94.282", "20k", RL_ZOO_BENCHMARK, _ZOO_NOTE),
        Published(
            "CleanRL",
            "n/a",
            "",
            "https://docs.cleanrl.dev/rl-algorithms/ddpg/#ddpg_continuous_actionpy",
            "no Pendulum-v1 figure",
        ),
    ],
    "impala_cartpole": [
        Published(
            "rl-zoo SB3 A2C CartPole-v1 (the peer; no IMPALA in rl-zoo)",
            "500.000 ± 0.000",
            "500k",
            RL_ZOO_BENCHMARK,
            _ZOO_NOTE,
        ),
        Published("CleanRL", "n/a", "", "https://docs.cleanrl.dev/rl-algorithms/overview/", "CleanRL has no IMPALA"),
    ],
    "ppo_halfcheetah": [
        Published(
            "rl-zoo SB3 PPO HalfCheetah-v3",
            "5819.099 ± 663.530",
            "1M",
            RL_ZOO_BENCHMARK,
            _ZOO_NOTE + "; HalfCheetah-v3",
        ),
        Published(
            "CleanRL ppo_continuous_action.py HalfCheetah-v4",
            "1442.64 ± 46.03",
            "1M",
            "https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_continuous_actionpy",
            _CLEANRL_NOTE + "; HalfCheetah-v4",
        ),
    ],
    "sac_halfcheetah": [
        Published(
            "rl-zoo SB3 SAC HalfCheetah-v3",
            "9535.451 ± 100.470",
            "1M",
            RL_ZOO_BENCHMARK,
            _ZOO_NOTE + "; HalfCheetah-v3",
        ),
        Published(
            "CleanRL sac_continuous_action.py HalfCheetah-v2",
            "9634.89 ± 1423.73",
            "1M",
            "https://docs.cleanrl.dev/rl-algorithms/sac/#sac_continuous_actionpy",
            _CLEANRL_NOTE + "; HalfCheetah-v2",
        ),
    ],
}
