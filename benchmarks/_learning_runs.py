"""One run of one framework on one config for ``learning.py``: msrl through ``msrl.train``, SB3
with rl-zoo's hyper-parameters, each recorded as a ``RunResult`` (training episodes, wall time,
the final greedy returns) with its rolling-mean curve."""

from __future__ import annotations

import copy
import io
import math
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from _learning_specs import CONFIG_DIR, EVAL_SEED_OFFSET, WINDOW, ZOO_HYPERPARAMS, Spec
from _shared_eval import msrl_act, sb3_act, shared_eval


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


def run_msrl(
    config: str,
    seed: int,
    budget: int,
    eval_episodes: int,
    runs_dir: str,
    extra: Sequence[str] = (),
    shared: str | None = None,
) -> RunResult:
    """``msrl.train`` as a user calls it, with ``extra`` overrides before the run's own (seed, budget,
    ...); the curve comes from its per-iteration metrics, whose ``wall_time`` is that iteration's
    seconds (summed here into wall seconds so far).  ``shared`` (the config's env id): the greedy
    returns are those on the start states every run shares (``_shared_eval``), not msrl's own
    evaluation's."""
    import msrl

    stream = io.StringIO()
    try:
        run = msrl.train(
            str(CONFIG_DIR / f"{config}.yaml"),
            overrides=[*extra, *msrl_overrides(seed, budget, eval_episodes, runs_dir)],
            stream=stream,
        )
    except BaseException:
        sys.stderr.write(stream.getvalue()[-4000:])
        raise
    returns = [float(r) for r in run.evaluation.returns]
    if shared:
        returns = shared_eval(shared, eval_episodes, msrl_act(run.checkpoint))
    result = RunResult(config, "msrl", seed, int(run.env_steps), float(run.wall_time), returns)
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
    return max(fragment.cpus for fragment in loaded.policy.fragments)


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
    if params.pop("td_loss", "huber") == "mse":
        algorithm = _squared_error_dqn(algorithm)
    return algorithm(env=env, seed=seed, device="cpu", verbose=0, **params)


def _squared_error_dqn(dqn: type) -> type:
    """SB3's DQN minimising the squared TD error, as CleanRL's ``dqn.py`` and msrl's ``algo.loss: mse``
    do: SB3 has only the Huber loss (its ``train`` calls ``F.smooth_l1_loss``, the one function of
    ``torch.nn.functional`` its module uses, swapped here for ``mse_loss`` while ``train`` runs)."""
    import types

    module = sys.modules[dqn.__module__]

    class SquaredErrorDQN(dqn):  # type: ignore[misc, valid-type]
        def train(self, gradient_steps: int, batch_size: int = 100) -> None:
            functional, module.F = module.F, types.SimpleNamespace(smooth_l1_loss=torch.nn.functional.mse_loss)
            try:
                super().train(gradient_steps, batch_size)
            finally:
                module.F = functional

    return SquaredErrorDQN


def normalize_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """rl-zoo passes the algorithm's gamma to VecNormalize when the entry sets one."""
    return {"gamma": params["gamma"]} if "gamma" in params else {}


def run_sb3(
    config: str, spec: Spec, seed: int, budget: int, eval_episodes: int, threads: int, shared: bool = False
) -> RunResult:
    """Train with ``learn(total_timesteps=budget)``, recording every training episode from the
    Monitor wrapper's ``info["episode"]`` (raw returns, also under VecNormalize), then evaluate
    greedily on ``eval_episodes`` fresh environments (``shared``: on the start states every run
    shares, ``_shared_eval``)."""
    from stable_baselines3.common.callbacks import BaseCallback

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

    returns = (
        shared_eval(spec.env_id, eval_episodes, sb3_act(model))
        if shared
        else own_eval(model, spec, seed, eval_episodes)
    )
    model.get_env().close()
    return RunResult(config, "sb3", seed, int(model.num_timesteps), wall, returns, episodes)


def own_eval(model: Any, spec: Spec, seed: int, eval_episodes: int) -> list[float]:
    """SB3's greedy returns on ``eval_episodes`` fresh environments seeded from ``seed`` (env ``i``:
    ``seed + EVAL_SEED_OFFSET + i``), normalised with the training statistics where it trained so."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

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
    return [float(r) for r in returns]
