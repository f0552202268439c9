"""Learning quality: msrl against Stable-Baselines3 (SB3) with rl-baselines3-zoo (rl-zoo) hyper-parameters.

What it measures, per config in ``configs/`` (a2c_cartpole, dqn_cartpole, ppo_cartpole,
ppo_pendulum, sac_pendulum, impala_cartpole, ppo_halfcheetah, sac_halfcheetah), for msrl as
configured there and for SB3's same algorithm with rl-zoo's tuned hyper-parameters for the env:

* the final greedy return: after training, one deterministic episode in each of
  ``--eval-episodes`` fresh environments (seeded ``seed + 7919``, apart from training's);
  a seed's value is the mean over its episodes, the table gives mean ± sample std over seeds;
* the training wall time (model construction and the final evaluation are not on the clock);
* the wall seconds and env steps until the mean of the last 10 *training* episode returns first
  reached the threshold (CartPole 475, Pendulum -250, HalfCheetah 3000), as a mean over the
  seeds that reached it, with "k/N reached".  msrl reports one mean return per iteration over the
  episodes that ended in it; those count as that many episodes of that return;
* training curves (episode return against env steps and against wall seconds), one PNG per config.

How: both frameworks get the same env-step budget, the msrl config's ``total_env_steps`` (times
``--steps-scale``, or ``--steps``), not rl-zoo's ``n_timesteps``; rl-zoo's ``lin_`` schedules
therefore decay to 0 over that budget, as they do under rl-zoo's ``train.py -n BUDGET``.  Both
stop at the first iteration/rollout that reaches the budget, so either may overshoot it by less
than one iteration; the table gives the steps actually taken.  Seeds 0..N-1 run interleaved
(msrl seed 0, SB3 seed 0, msrl seed 1, ...) in this one process on this one machine, so drifting
machine speed hits both alike.  msrl keeps its own torch thread count (the ``local`` policy's
``cpus``, 1 by default); SB3 is given the same with ``torch.set_num_threads``.  msrl runs with
``progress=false checkpoint_every=0`` (no checkpoints during training, as SB3 writes none) and its
run directories go to a temporary directory under ``--out``.  IMPALA has no SB3 counterpart:
``impala_cartpole`` is compared with SB3's A2C on CartPole-v1 with rl-zoo's hyper-parameters.
HalfCheetah-v5 needs ``gymnasium[mujoco]``; without it those configs are skipped with a reason
(the script works inside ``--out``, where MuJoCo writes its ``MUJOCO_LOG.TXT``).

The numbers in BENCHMARKS.md come from::

    python benchmarks/learning.py --seeds 3

which writes ``summary.md``, ``summary.csv``, ``runs.csv``, ``curves.json`` and ``<config>.png``
under ``benchmarks/results/learning``.  SB3 comes from the ``bench`` extra:
``pip install -c constraints.txt -e '.[bench]'`` (and ``'.[mujoco]'`` for HalfCheetah).
"""

from __future__ import annotations

import argparse
import copy
import csv
import importlib
import io
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "configs"
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "learning"
EVAL_SEED_OFFSET = 7919
"""Evaluation environments are seeded ``seed + 7919``, as msrl seeds its final evaluation."""
WINDOW = 10
"""Training episodes in the rolling mean that is compared with the threshold."""
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


SPECS: dict[str, Spec] = {
    "a2c_cartpole": Spec("CartPole-v1", "a2c", "A2C", "a2c.yml", "CartPole-v1"),
    "dqn_cartpole": Spec("CartPole-v1", "dqn", "DQN", "dqn.yml", "CartPole-v1"),
    "ppo_cartpole": Spec("CartPole-v1", "ppo", "PPO", "ppo.yml", "CartPole-v1"),
    "ppo_pendulum": Spec("Pendulum-v1", "ppo", "PPO", "ppo.yml", "Pendulum-v1"),
    "sac_pendulum": Spec("Pendulum-v1", "sac", "SAC", "sac.yml", "Pendulum-v1"),
    "impala_cartpole": Spec(
        "CartPole-v1",
        "impala",
        "A2C",
        "a2c.yml",
        "CartPole-v1",
        note="IMPALA has no SB3 counterpart: its peer is SB3's A2C with rl-zoo's CartPole-v1 hyper-parameters",
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


# -- records ----------------------------------------------------------------------------------------
@dataclass
class EpisodeBatch:
    """Training episodes that ended at one point: ``count`` episodes with mean return ``mean_return``
    (SB3: one per episode; msrl: one per iteration), with the env steps and wall seconds so far."""

    env_steps: int
    wall_seconds: float
    mean_return: float
    count: int = 1


@dataclass
class CurvePoint:
    env_steps: int
    wall_seconds: float
    rolling_return: float  # mean return of the last WINDOW episodes (fewer at the start)
    episodes_seen: int


@dataclass
class RunResult:
    """What one framework did with one seed on one config."""

    config: str
    framework: str
    seed: int
    env_steps: int
    wall_seconds: float
    eval_returns: list[float]
    episodes: list[EpisodeBatch] = field(default_factory=list)

    @property
    def final_return(self) -> float:
        return statistics.fmean(self.eval_returns) if self.eval_returns else float("nan")

    def curve(self) -> list[CurvePoint]:
        """The rolling mean of the last ``WINDOW`` training episodes after each batch."""
        points: list[CurvePoint] = []
        recent: deque[tuple[float, int]] = deque()
        total = seen = 0
        for batch in self.episodes:
            recent.append((batch.mean_return, batch.count))
            total += batch.count
            seen += batch.count
            while total - recent[0][1] >= WINDOW:
                total -= recent.popleft()[1]
            need, taken, acc = min(WINDOW, total), 0, 0.0
            for value, count in reversed(recent):
                k = min(count, need - taken)
                acc, taken = acc + value * k, taken + k
                if taken >= need:
                    break
            points.append(CurvePoint(batch.env_steps, batch.wall_seconds, acc / taken, seen))
        return points

    def reached(self, threshold: float) -> CurvePoint | None:
        """The first point whose full window of ``WINDOW`` episodes averages at least ``threshold``."""
        return next((p for p in self.curve() if p.episodes_seen >= WINDOW and p.rolling_return >= threshold), None)


# -- msrl -------------------------------------------------------------------------------------------
def msrl_overrides(seed: int, budget: int, eval_episodes: int, runs_dir: str) -> list[str]:
    return [
        f"seed={seed}",
        f"total_env_steps={budget}",
        f"runs_dir={runs_dir}",
        f"eval_episodes={eval_episodes}",
        "progress=false",
        "checkpoint_every=0",
    ]


def run_msrl(config: str, seed: int, budget: int, eval_episodes: int, runs_dir: str) -> RunResult:
    """``msrl.train`` as a user calls it; the curve comes from its per-iteration metrics, whose
    ``wall_time`` is that iteration's seconds (summed here into wall seconds so far)."""
    import msrl

    stream = io.StringIO()
    try:
        run = msrl.train(
            str(CONFIG_DIR / f"{config}.yaml"),
            overrides=msrl_overrides(seed, budget, eval_episodes, runs_dir),
            stream=stream,
        )
    except BaseException:
        sys.stderr.write(stream.getvalue()[-4000:])
        raise
    result = RunResult(
        config, "msrl", seed, int(run.env_steps), float(run.wall_time), [float(r) for r in run.evaluation.returns]
    )
    wall = 0.0
    for record in run.metrics:
        wall += float(record["wall_time"])
        value = record.get("episode_return")
        if isinstance(value, (int, float)) and math.isfinite(value):
            count = record.get("episodes", 1)
            count = int(count) if isinstance(count, (int, float)) and count >= 1 else 1
            result.episodes.append(EpisodeBatch(int(record["env_steps"]), wall, float(value), count))
    return result


def msrl_threads(loaded: Any) -> int:
    """torch threads msrl trains with under this config: its fragments' ``cpus`` (1 for ``local``)."""
    from policies import load_policy

    return max(fragment.cpus for fragment in load_policy(loaded.run.policy).fragments)


# -- Stable-Baselines3 ------------------------------------------------------------------------------
def zoo_hyperparameters(spec: Spec) -> dict[str, Any]:
    return copy.deepcopy(ZOO_HYPERPARAMS[(spec.zoo_file, spec.zoo_env)])


def make_sb3_model(spec: Spec, seed: int) -> Any:
    """The model rl-zoo's ExpManager builds for this entry: ``n_envs`` Monitor-wrapped envs in a
    DummyVecEnv (make_vec_env), VecNormalize when ``normalize`` is set, the rest as model arguments."""
    import stable_baselines3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    params = zoo_hyperparameters(spec)
    n_envs = int(params.pop("n_envs", 1))
    params.pop("n_timesteps")  # the budget replaces it
    normalize = params.pop("normalize", False)
    env = make_vec_env(spec.env_id, n_envs=n_envs, seed=seed)
    if normalize:
        env = VecNormalize(env, **normalize_kwargs(params))
    algorithm = getattr(stable_baselines3, spec.sb3_algo)
    return algorithm(env=env, seed=seed, device="cpu", verbose=0, **params)


def normalize_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """rl-zoo passes the algorithm's gamma to VecNormalize when the entry sets one."""
    return {"gamma": params["gamma"]} if "gamma" in params else {}


def run_sb3(config: str, spec: Spec, seed: int, budget: int, eval_episodes: int, threads: int) -> RunResult:
    """Train with ``learn(total_timesteps=budget)``, recording every training episode from the
    Monitor wrapper's ``info["episode"]`` (raw returns, also under VecNormalize), then evaluate
    greedily on ``eval_episodes`` fresh environments."""
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(threads)
    model = make_sb3_model(spec, seed)
    episodes: list[EpisodeBatch] = []
    started = [0.0]

    class EpisodeRecorder(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                episode = info.get("episode")
                if episode is not None:
                    episodes.append(
                        EpisodeBatch(int(self.num_timesteps), time.perf_counter() - started[0], float(episode["r"]))
                    )
            return True

    started[0] = time.perf_counter()
    model.learn(total_timesteps=budget, callback=EpisodeRecorder())
    wall = time.perf_counter() - started[0]

    eval_env = make_vec_env(spec.env_id, n_envs=eval_episodes, seed=seed + EVAL_SEED_OFFSET)
    train_norm = model.get_vec_normalize_env()
    if train_norm is not None:
        eval_env = VecNormalize(
            eval_env, training=False, norm_reward=False, **normalize_kwargs(zoo_hyperparameters(spec))
        )
        eval_env.obs_rms = copy.deepcopy(train_norm.obs_rms)
    returns, _ = evaluate_policy(
        model, eval_env, n_eval_episodes=eval_episodes, deterministic=True, return_episode_rewards=True
    )
    eval_env.close()
    model.get_env().close()
    return RunResult(config, "sb3", seed, int(model.num_timesteps), wall, [float(r) for r in returns], episodes)


# -- summary ----------------------------------------------------------------------------------------
def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def framework_label(spec: Spec, framework: str) -> str:
    if framework == "msrl":
        return f"msrl {spec.msrl_algo}"
    return f"SB3 {spec.sb3_algo} (rl-zoo {spec.zoo_env})"


def summarize(config: str, spec: Spec, framework: str, results: Sequence[RunResult], budget: int) -> dict[str, Any]:
    threshold = THRESHOLDS[spec.env_id]
    hits = [r.reached(threshold) for r in results]
    reached = [h for h in hits if h is not None]
    final_mean, final_std = _mean_std([r.final_return for r in results])
    wall_mean, wall_std = _mean_std([r.wall_seconds for r in results])
    return {
        "config": config,
        "env_id": spec.env_id,
        "framework": framework,
        "label": framework_label(spec, framework),
        "seeds": len(results),
        "budget": budget,
        "env_steps_mean": statistics.fmean(r.env_steps for r in results),
        "final_return_mean": final_mean,
        "final_return_std": final_std,
        "wall_s_mean": wall_mean,
        "wall_s_std": wall_std,
        "threshold": threshold,
        "reached": len(reached),
        "seconds_to_threshold_mean": statistics.fmean(h.wall_seconds for h in reached) if reached else None,
        "steps_to_threshold_mean": statistics.fmean(h.env_steps for h in reached) if reached else None,
    }


def _published_cell(config: str) -> str:
    refs = PUBLISHED.get(config, [])
    parts = [f"{p.source}: {p.figure}" + (f" @ {p.budget}" if p.budget and p.figure != "n/a" else "") for p in refs]
    return "; ".join(parts) or "n/a"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        (
            "| config | framework | env steps | final greedy return | wall s | wall s to threshold "
            "| env steps to threshold "
            "| reached | published (mean ± std @ training steps) |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    shown: set[str] = set()
    for row in rows:
        first = row["config"] not in shown
        shown.add(row["config"])
        config = f"{row['config']} ({row['env_id']}, ≥ {row['threshold']:g})" if first else ""
        seconds = "—" if row["seconds_to_threshold_mean"] is None else f"{row['seconds_to_threshold_mean']:,.1f}"
        steps = "—" if row["steps_to_threshold_mean"] is None else f"{row['steps_to_threshold_mean']:,.0f}"
        lines.append(
            f"| {config} | {row['label']} | {row['env_steps_mean']:,.0f} | "
            f"{row['final_return_mean']:.1f} ± {row['final_return_std']:.1f} | "
            f"{row['wall_s_mean']:,.1f} ± {row['wall_s_std']:.1f} | "
            f"{seconds} | {steps} | {row['reached']}/{row['seeds']} | "
            f"{_published_cell(row['config']) if first else ''} |"
        )
    return "\n".join(lines)


def sources_text(configs: Sequence[str]) -> str:
    lines = ["Published figures:"]
    for config in configs:
        for p in PUBLISHED.get(config, []):
            figure = p.figure if p.figure == "n/a" else f"{p.figure} after {p.budget} steps"
            lines.append(f"- {config}: {p.source}: {figure} ({p.note}) <{p.url}>")
    return "\n".join(lines)


# -- output -----------------------------------------------------------------------------------------
def plot(config: str, spec: Spec, results: Sequence[RunResult], budget: int, path: Path) -> None:
    """Two panels (return vs env steps, vs wall seconds): per framework the mean over seeds of the
    rolling mean of 10 episodes on a common grid, with a min-max band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    colours = {"msrl": "tab:blue", "sb3": "tab:orange"}
    threshold = THRESHOLDS[spec.env_id]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    seeds = sorted({r.seed for r in results})
    for framework in FRAMEWORKS:
        curves = [r.curve() for r in results if r.framework == framework]
        curves = [c for c in curves if c]
        if not curves:
            continue
        label = f"{framework_label(spec, framework)}, {len(curves)} seed{'s' if len(curves) > 1 else ''}"
        for ax, attr in zip(axes, ("env_steps", "wall_seconds")):
            xs = [np.array([getattr(p, attr) for p in c], dtype=float) for c in curves]
            ys = [np.array([p.rolling_return for p in c], dtype=float) for c in curves]
            lo, hi = max(x[0] for x in xs), min(x[-1] for x in xs)
            if hi <= lo:  # seeds do not overlap: show each seed's own curve
                for i, (x, y) in enumerate(zip(xs, ys)):
                    ax.plot(x, y, color=colours[framework], label=label if i == 0 else None)
                continue
            grid = np.linspace(lo, hi, 300)
            stack = np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys)])
            ax.plot(grid, stack.mean(axis=0), color=colours[framework], linewidth=2, label=label)
            if max(len(x) for x in xs) < 40:  # few points (msrl: one per iteration): show where they are
                for x, y in zip(xs, ys):
                    ax.plot(x, y, linestyle="none", marker=".", color=colours[framework], alpha=0.6)
            ax.fill_between(
                grid, stack.min(axis=0), stack.max(axis=0), color=colours[framework], alpha=0.2, linewidth=0
            )
    for ax, xlabel in zip(axes, ("env steps", "wall time [s]")):
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"episode return (mean of last {WINDOW} training episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    axes[0].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_steps_label))
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}"
    fig.suptitle(f"{config}: {spec.env_id}, budget {budget:,} env steps, {seed_text}; mean over seeds, band = min–max")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _steps_label(x: float, _pos: Any = None) -> str:
    """Env-step ticks as 50k, 1.5M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    return f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def write_outputs(
    out: Path, rows: list[dict[str, Any]], results: list[RunResult], meta: dict[str, Any], table: str
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(table + "\n", encoding="utf-8")
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["config"])
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "runs.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "config",
                "framework",
                "seed",
                "env_steps",
                "wall_s",
                "final_greedy_return",
                "eval_episodes",
                "training_episodes",
                "threshold",
                "wall_s_to_threshold",
                "env_steps_to_threshold",
            ]
        )
        for r in results:
            hit = r.reached(THRESHOLDS[SPECS[r.config].env_id])
            writer.writerow(
                [
                    r.config,
                    r.framework,
                    r.seed,
                    r.env_steps,
                    f"{r.wall_seconds:.3f}",
                    f"{r.final_return:.3f}",
                    len(r.eval_returns),
                    sum(b.count for b in r.episodes),
                    THRESHOLDS[SPECS[r.config].env_id],
                    "" if hit is None else f"{hit.wall_seconds:.3f}",
                    "" if hit is None else hit.env_steps,
                ]
            )
    curves = {
        "meta": meta,
        "runs": [
            {
                **{k: v for k, v in asdict(r).items() if k != "episodes"},
                "episodes": [[b.env_steps, round(b.wall_seconds, 4), b.mean_return, b.count] for b in r.episodes],
                "episodes_columns": ["env_steps", "wall_seconds", "mean_return", "count"],
            }
            for r in results
        ],
    }
    (out / "curves.json").write_text(json.dumps(curves), encoding="utf-8")


def _jsonable(value: Any) -> Any:
    """Numbers, strings and containers as they are; anything else (schedules, classes) as its repr."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def machine_info() -> str:
    import gymnasium

    versions = [
        f"python {platform.python_version()}",
        f"torch {torch.__version__}",
        f"gymnasium {gymnasium.__version__}",
    ]
    for name in ("stable_baselines3", "mujoco"):
        try:
            versions.append(f"{name.replace('_', '-')} {importlib.import_module(name).__version__}")
        except ImportError:
            pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{platform.platform()}, {platform.processor() or platform.machine()}, "
        f"cpu_count {os.cpu_count()} ({usable} usable); {', '.join(versions)}"
    )


# -- main -------------------------------------------------------------------------------------------
def mujoco_problem(env_id: str) -> str | None:
    """Why ``env_id`` cannot be built here (MuJoCo envs only), or None."""
    if not env_id.startswith("HalfCheetah"):
        return None
    try:
        import gymnasium

        importlib.import_module("mujoco")
        gymnasium.make(env_id).close()
    except Exception as exc:  # ImportError, DependencyNotInstalled, ...
        hint = "pip install -c constraints.txt -e '.[mujoco]'"
        return f"{env_id} needs gymnasium[mujoco] ({hint}): {str(exc).splitlines()[0]}"
    return None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", default=",".join(SPECS), help=f"comma-separated configs (default: all: {','.join(SPECS)})"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per framework (default 3)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--steps-scale", type=float, default=1.0, help="multiply each config's total_env_steps (default 1.0)"
    )
    budget.add_argument(
        "--steps", type=int, default=None, help="env-step budget for every config (overrides the configs')"
    )
    parser.add_argument("--frameworks", default="msrl,sb3", help="comma-separated subset of msrl,sb3 (default both)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default benchmarks/results/learning)"
    )
    parser.add_argument("--eval-episodes", type=int, default=20, help="final greedy episodes per run (default 20)")
    args = parser.parse_args(argv)
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in args.configs if c not in SPECS]
    if unknown or not args.configs:
        parser.error(f"unknown config {unknown[0] if unknown else ''!r}; valid choices: {', '.join(SPECS)}")
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if not args.frameworks or any(f not in FRAMEWORKS for f in args.frameworks):
        parser.error(f"--frameworks takes a comma-separated subset of {','.join(FRAMEWORKS)}")
    if args.seeds < 1 or args.eval_episodes < 1 or (args.steps is not None and args.steps < 1) or args.steps_scale <= 0:
        parser.error("--seeds, --eval-episodes and --steps must be >= 1, --steps-scale > 0")
    return args


@dataclass
class Plan:
    config: str
    spec: Spec
    budget: int
    threads: int
    threads_note: str


def plan_configs(args: argparse.Namespace) -> tuple[list[Plan], list[str]]:
    """Check every requested config before anything runs; returns the plans and the skip reasons."""
    plans, skipped = [], []
    for config in args.configs:
        spec = SPECS[config]
        problem = mujoco_problem(spec.env_id)
        if problem:
            skipped.append(f"{config}: skipped: {problem}")
            continue
        path = CONFIG_DIR / f"{config}.yaml"
        loaded = None
        if path.exists():
            from msrl.app import load_config

            try:
                loaded = load_config(str(path), msrl_overrides(0, 1, args.eval_episodes, "runs"))
            except Exception as exc:
                sys.exit(f"learning.py: error: {path.relative_to(REPO_ROOT)} is not a valid msrl config: {exc}")
            env_id = loaded.raw.get("algo", {}).get("env_id", spec.env_id)
            if loaded.run.algorithm != spec.msrl_algo or env_id != spec.env_id:
                sys.exit(
                    f"learning.py: error: {path.relative_to(REPO_ROOT)} trains {loaded.run.algorithm!r} on {env_id!r}; "
                    f"this benchmark expects {spec.msrl_algo!r} on {spec.env_id!r}"
                )
        elif "msrl" in args.frameworks or args.steps is None:
            need = "msrl's runs" if "msrl" in args.frameworks else "the default budget (its total_env_steps)"
            sys.exit(
                f"learning.py: error: config {path.relative_to(REPO_ROOT)} not found; it is needed for {need}. "
                f"Choose other --configs{'' if 'msrl' in args.frameworks else ' or give --steps'}."
            )
        if args.steps is not None:
            budget = args.steps
        else:
            with open(path, encoding="utf-8") as handle:
                default = int(yaml.safe_load(handle)["total_env_steps"])
            budget = max(1, round(default * args.steps_scale))
        if loaded is not None:
            threads, note = msrl_threads(loaded), "as msrl's policy uses"
        else:
            threads, note = 1, "msrl config absent: msrl's default for the local policy is 1"
        plans.append(Plan(config, spec, budget, threads, note))
    return plans, skipped


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if "sb3" in args.frameworks:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            sys.exit(
                "learning.py: error: stable-baselines3 is not installed; pip install -c constraints.txt -e '.[bench]'"
            )
    command = shlex.join(["python", *sys.argv]) if argv is None else shlex.join(["python", __file__, *argv])
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(out)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory: keep it out of the checkout
    try:
        return run_benchmark(args, out, command)
    finally:
        os.chdir(cwd)


def run_benchmark(args: argparse.Namespace, out: Path, command: str) -> int:
    plans, skipped = plan_configs(args)
    for reason in skipped:
        print(reason, flush=True)
    print(f"command: {command}\nmachine: {machine_info()}\n", flush=True)
    meta: dict[str, Any] = {
        "command": command,
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seeds": list(range(args.seeds)),
        "eval_episodes": args.eval_episodes,
        "window": WINDOW,
        "frameworks": args.frameworks,
        "skipped": skipped,
        "configs": {},
    }
    rows: list[dict[str, Any]] = []
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="msrl-runs-", dir=out) as runs_dir:
        for p in plans:
            print(
                f"== {p.config}: {p.spec.env_id}, budget {p.budget:,} env steps, SB3 torch threads {p.threads} "
                f"({p.threads_note})" + (f"; {p.spec.note}" if p.spec.note else ""),
                flush=True,
            )
            meta["configs"][p.config] = {
                "env_id": p.spec.env_id,
                "budget": p.budget,
                "threshold": THRESHOLDS[p.spec.env_id],
                "msrl_algorithm": p.spec.msrl_algo,
                "sb3_algorithm": p.spec.sb3_algo,
                "sb3_torch_threads": p.threads,
                "rl_zoo_entry": f"hyperparams/{p.spec.zoo_file} {p.spec.zoo_env}",
                "note": p.spec.note,
                "rl_zoo_hyperparameters": _jsonable(zoo_hyperparameters(p.spec)),
                "published": [asdict(x) for x in PUBLISHED.get(p.config, [])],
            }
            mine: list[RunResult] = []
            for seed in range(args.seeds):  # interleaved: msrl seed 0, SB3 seed 0, msrl seed 1, ...
                for framework in args.frameworks:
                    if framework == "msrl":
                        r = run_msrl(p.config, seed, p.budget, args.eval_episodes, runs_dir)
                    else:
                        r = run_sb3(p.config, p.spec, seed, p.budget, args.eval_episodes, p.threads)
                    mine.append(r)
                    hit = r.reached(THRESHOLDS[p.spec.env_id])
                    where = "not reached" if hit is None else f"at {hit.wall_seconds:.1f} s / {hit.env_steps:,} steps"
                    print(
                        f"  {framework_label(p.spec, framework):<32} seed {seed}: {r.env_steps:>9,} steps "
                        f"{r.wall_seconds:8.1f} s  greedy {r.final_return:8.1f}  "
                        f"threshold {where}",
                        flush=True,
                    )
            results.extend(mine)
            rows.extend(
                summarize(p.config, p.spec, f, [r for r in mine if r.framework == f], p.budget) for f in args.frameworks
            )
            try:
                plot(p.config, p.spec, mine, p.budget, out / f"{p.config}.png")
            except Exception:  # a plot must not cost the numbers
                traceback.print_exc()
            table = markdown_table(rows)
            write_outputs(out, rows, results, meta, table)
    seeds = "seed 0" if args.seeds == 1 else f"seeds 0–{args.seeds - 1} interleaved"
    header = (
        f"Learning quality, msrl vs SB3 (rl-zoo hyper-parameters): same env-step budget per config, "
        f"{seeds}, final greedy return over {args.eval_episodes} fresh episodes "
        f"(mean ± std over seeds), threshold on the mean of the last {WINDOW} training episodes "
        f"(time/steps: mean over the seeds that reached it)."
    )
    notes = [SPECS[p.config].note and f"- {p.config}: {SPECS[p.config].note}" for p in plans]
    table = "\n\n".join(
        x
        for x in [
            header,
            markdown_table(rows),
            "\n".join(n for n in notes if n),
            "\n".join(skipped),
            sources_text([p.config for p in plans]),
            f"`{command}` -- {machine_info()}",
        ]
        if x
    )
    print("\n" + table)
    if rows:
        write_outputs(out, rows, results, meta, table)
        print(
            f"\nwrote {out}/summary.md, summary.csv, runs.csv, curves.json and "
            f"{', '.join(p.config + '.png' for p in plans)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
