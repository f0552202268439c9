"""The peers of ``benchmarks.atari_speed`` that are whole frameworks of their own: RLlib's PPO,
IMPALA and APPO (new API stack) and Sample Factory's APPO, each on Pong at the settings of the msrl
config it stands beside, stepped the way its own Atari examples step the game.

RLlib: ale-py's ``ALE/Pong-v5`` with frame skip off, wrapped by RLlib's own
``wrap_atari_for_new_api_stack`` (84x84 grayscale, max over 4 frames, 30 no-op starts, episodic
life, fire on reset, a 4-frame stack; its frames become float32 in ``[-1, 1]`` there), rewards
clipped by RLlib, the Nature-CNN (``conv_filters`` 32x8/4, 64x4/2, 64x3/1, a 512-unit head shared
by the policy and the value).  PPO samples in this process (``num_env_runners=0``, the faster
layout on two cores: PPO's ``training_step`` waits for its sample and then for its update, so a
remote runner only adds a hop); IMPALA and APPO sample in one remote env runner while the learner
learns in this process, a core each, as msrl's ``async_single_learner`` places them.  What is not
matched: RLlib's IMPALA and APPO learners use Adam (msrl's config: RMSProp), which costs the same.

Sample Factory: its ``sf_examples.atari.train_atari`` on ``atari_pong`` (its own wrappers over
gymnasium's ALE ids, the same preprocessing, its ``convnet_atari`` encoder: the Nature-CNN) in a
virtual environment of its own (Sample Factory 2.1 pins ``numpy<2`` and ``gymnasium<1.0``; ale-py
0.9.1, which ships its ROMs and still runs on gymnasium 0.29), as APPO: its asynchronous PPO (rollout worker,
inference worker and learner in processes of their own), one worker of as many games as
``configs/impala_atari.yaml`` steps, with its trajectories, batches, minibatches, learning rate,
entropy cost and clip.  Its rate is read from the frames it reports having collected, divided by
its frame skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

NATURE_CNN: list[Any] = [[32, [8, 8], 4], [64, [4, 4], 2], [64, [3, 3], 1]]
ENV_NAME = "msrl-bench-pong"


def rllib_missing() -> str | None:
    """Why RLlib's Atari peers cannot run here (one line), or None when they can."""
    try:
        import ale_py  # noqa: F401
        from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack  # noqa: F401
    except ImportError as exc:
        return f"RLlib's Atari peers need ray[rllib] and ale-py ({exc}); install the bench and atari extras"
    return None


def _register_pong() -> None:
    import ale_py
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
    from ray.tune.registry import register_env

    def make(config: dict[str, Any]) -> Any:
        gym.register_envs(ale_py)  # in the env runner's process too
        env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, full_action_space=False)
        return wrap_atari_for_new_api_stack(env, dim=84, framestack=4)

    register_env(ENV_NAME, make)


def _model_config() -> Any:
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return DefaultModelConfig(
        conv_filters=NATURE_CNN, conv_activation="relu", head_fcnet_hiddens=[512], vf_share_layers=True
    )


def _algo(config: str, settings: type) -> Any:
    """The ``algo`` section of the shipped config ``configs/<config>.yaml`` over its defaults."""
    import yaml

    from benchmarks.harness import REPO

    return settings(**yaml.safe_load((REPO / "configs" / f"{config}.yaml").read_text())["algo"])


def rllib_config(kind: str, seed: int, budget: int) -> Any:
    """RLlib's ``PPOConfig`` at ``configs/ppo_atari.yaml``'s settings (CleanRL's ``ppo_atari_envpool``)
    or its ``IMPALAConfig`` / ``APPOConfig`` at ``configs/impala_atari.yaml``'s, on Pong."""
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.algorithms.ppo import PPOConfig

    import algorithms.impala
    import algorithms.ppo

    _register_pong()
    config: Any
    if kind == "ppo":
        algo = _algo("ppo_atari", algorithms.ppo.PPOConfig)
        batch = algo.num_envs * algo.num_steps
        lr = [[0, algo.learning_rate], [budget, 0.0]] if algo.anneal_lr else algo.learning_rate
        config = (
            PPOConfig()
            .env_runners(num_env_runners=0, num_envs_per_env_runner=algo.num_envs)
            .env_runners(rollout_fragment_length=algo.num_steps)
            .training(
                train_batch_size_per_learner=batch,
                minibatch_size=batch // algo.num_minibatches,
                num_epochs=algo.update_epochs,
                lr=lr,
                gamma=algo.gamma,
                lambda_=algo.gae_lambda,
                clip_param=algo.clip_coef,
                vf_clip_param=10.0,
                vf_loss_coeff=0.5 * algo.vf_coef,  # msrl halves its squared error, RLlib's PPO does not
                entropy_coeff=algo.ent_coef,
                use_kl_loss=False,
                grad_clip=algo.max_grad_norm,
                grad_clip_by="global_norm",
            )
        )
    elif kind in ("impala", "appo"):
        algo = _algo("impala_atari", algorithms.impala.IMPALAConfig)
        config = (APPOConfig() if kind == "appo" else IMPALAConfig()).env_runners(
            num_env_runners=1, num_envs_per_env_runner=algo.num_envs, rollout_fragment_length=algo.num_steps
        )
        batch = algo.num_envs * algo.num_steps
        config = config.training(
            train_batch_size_per_learner=batch,
            minibatch_size=batch // algo.num_minibatches,
            num_epochs=algo.update_epochs,
            lr=algo.learning_rate,
            gamma=algo.gamma,
            vf_loss_coeff=algo.vf_coef,
            entropy_coeff=algo.ent_coef,
            grad_clip=algo.max_grad_norm,
            grad_clip_by="global_norm",
        )
    else:
        raise ValueError(f"unknown RLlib algorithm {kind!r}; valid: ppo, impala, appo")
    return (
        config.api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
        .environment(ENV_NAME, clip_rewards=True)
        .framework("torch")
        .learners(num_learners=0)
        .rl_module(model_config=_model_config())
        .debugging(seed=seed, log_level="ERROR")
    )


def run_rllib(kind: str, budget: int, warmup: int, threads: int, seed: int) -> dict[str, Any]:
    """RLlib's ``kind`` on Pong, one ``train()`` at a time until ``budget`` agent steps are sampled;
    agent steps per second after ``warmup`` calls.  Ray starts first if this process has none
    (listening on 127.0.0.1 only, as msrl's own clusters do)."""
    missing = rllib_missing()
    if missing:
        raise SystemExit(f"atari_speed: error: {missing}")
    import torch

    from benchmarks.harness import start_ray

    start_ray()
    torch.set_num_threads(threads)
    trainer = rllib_config(kind, seed, budget).build_algo()
    try:
        marks: list[tuple[int, float]] = []
        steps = 0
        while steps < budget:
            result = trainer.train()
            # an asynchronous algorithm's call can return before any sample has arrived
            steps = int(result.get("env_runners", {}).get("num_env_steps_sampled_lifetime", steps))
            marks.append((steps, time.perf_counter()))
    finally:
        trainer.stop()
    (steps0, t0), (steps1, t1) = marks[min(warmup, len(marks) - 2)], marks[-1]
    return {"framework": f"RLlib {kind.upper()}", "steps_per_s": (steps1 - steps0) / (t1 - t0), "profile": {}}


SAMPLE_FACTORY: dict[str, str] = {}
"""``python``: the interpreter of Sample Factory's own environment (``--sample-factory-python``)."""

FRAMES = re.compile(r"Fps is \(10 sec: [^)]*\)\. Total num frames: (\d+)")


def run_sample_factory(budget: int, warmup: int, threads: int, seed: int) -> dict[str, Any]:
    """Sample Factory's APPO on ``atari_pong`` in its own environment at ``configs/impala_atari.yaml``'s
    layout: one worker of its games, its trajectories, batches and minibatches, its learning rate,
    entropy cost and clip; agent steps per second between its first report past ``warmup`` batches
    and its last (it reports every 5 s)."""
    if not SAMPLE_FACTORY:
        raise SystemExit("atari_speed: error: the sf framework needs --sample-factory-python PY")
    import algorithms.impala

    algo = _algo("impala_atari", algorithms.impala.IMPALAConfig)
    batch = algo.num_envs * algo.num_steps
    frame_skip, deadline_s = 4, 120 + budget / 20  # 20 agent steps/s: far slower than any run here
    command = [SAMPLE_FACTORY["python"], "-m", "sf_examples.atari.train_atari", "--env=atari_pong"]
    # APPO as Sample Factory means it: asynchronous PPO (clipped, GAE); its V-trace option fails in
    # 2.1.1's learner without a recurrent core (it records minibatch advantages V-trace never sets).
    command += ["--async_rl=True", "--num_workers=1", f"--num_envs_per_worker={algo.num_envs}", "--worker_num_splits=1"]
    command += [f"--rollout={algo.num_steps}", f"--batch_size={batch // algo.num_minibatches}"]
    command += [f"--num_batches_per_epoch={algo.num_minibatches}", f"--num_epochs={algo.update_epochs}"]
    command += [f"--learning_rate={algo.learning_rate}", f"--exploration_loss_coeff={algo.ent_coef}"]
    command += [f"--max_grad_norm={algo.max_grad_norm}", "--device=cpu"]
    command += [f"--seed={seed}", f"--env_frameskip={frame_skip}", "--save_every_sec=100000"]
    command += [f"--train_for_env_steps={budget * frame_skip}", "--with_wandb=False", "--experiment=bench"]
    with tempfile.TemporaryDirectory(prefix="sample-factory-") as train_dir:
        # Its Atari example finds ALE's ids through gymnasium's plugin entry point, which ale-py
        # dropped when it began shipping its ROMs (0.9): importing ale_py in each of its processes
        # (a ``sitecustomize`` on their path) registers them.
        Path(train_dir, "sitecustomize.py").write_text("import ale_py  # noqa: F401\n")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": train_dir}
        command.append(f"--train_dir={train_dir}")
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        marks: list[tuple[int, float]] = []
        tail: list[str] = []
        assert process.stdout is not None
        for line in process.stdout:  # it logs every 5 s, so a stalled run is noticed here
            tail = (tail + [line])[-20:]
            found = FRAMES.search(line)
            if found:
                marks.append((int(found.group(1)) // frame_skip, time.perf_counter() - start))
            if "Unhandled exception" in line or time.perf_counter() - start > deadline_s:
                process.kill()  # a crashed learner leaves the other processes waiting for it
        process.wait()
    after = [mark for mark in marks if mark[0] >= warmup * batch]
    if process.returncode or len(after) < 2:
        raise SystemExit(
            f"atari_speed: error: Sample Factory failed (exit {process.returncode}): {''.join(tail)[-800:]}"
        )
    (steps0, t0), (steps1, t1) = after[0], after[-1]
    return {"framework": "Sample Factory APPO", "steps_per_s": (steps1 - steps0) / (t1 - t0), "profile": {}}
