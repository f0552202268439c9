"""One run of one framework on one config for ``benchmarks.learning_quality``: msrl through ``msrl.train``, SB3
with rl-zoo's hyper-parameters, each recorded as a ``TrainingRecord`` (msrl.app.gate's: training
episodes, wall time, the final greedy returns) with its rolling-mean curve."""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from benchmarks.learning_quality._shared_eval import msrl_act, sb3_act, shared_eval
from benchmarks.learning_quality._specs import CONFIG_DIR, EVAL_SEED_OFFSET, ZOO_HYPERPARAMS, Spec
from msrl.app.gate import EpisodeBatch, TrainingRecord, train_and_record


# -- msrl -------------------------------------------------------------------------------------------
def run_msrl(
    config: str,
    seed: int,
    budget: int,
    eval_episodes: int,
    runs_dir: str,
    extra: Sequence[str] = (),
    shared: str | None = None,
) -> TrainingRecord:
    """``msrl.train`` as a user calls it, recorded as the learning gate records it
    (``msrl.app.gate.train_and_record``).  ``shared`` (the config's env id): the greedy returns are
    those on the start states every run shares (``_shared_eval``), not msrl's own evaluation's."""
    record, run = train_and_record(CONFIG_DIR / f"{config}.yaml", seed, budget, eval_episodes, runs_dir, extra)
    if shared:
        record.eval_returns = shared_eval(shared, eval_episodes, msrl_act(run.checkpoint))
    return record


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
    if params.pop("noise_type", None) == "normal":  # rl-zoo's ExpManager: Gaussian action noise of noise_std
        from stable_baselines3.common.noise import NormalActionNoise

        dim = env.action_space.shape[0]
        params["action_noise"] = NormalActionNoise(np.zeros(dim), params.pop("noise_std") * np.ones(dim))
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
) -> TrainingRecord:
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
    return TrainingRecord(config, "sb3", seed, int(model.num_timesteps), wall, returns, episodes)


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
