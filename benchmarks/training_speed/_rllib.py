"""RLlib's PPO (new API stack) on CartPole-v1 at the settings of ``configs/ppo_cartpole.yaml``, the
second peer of ``benchmarks.training_speed``: the same budget, evaluation schedule and record as the others.

What is matched: 64 envs x 32 steps (2,048-step batches), 4 epochs of 256-row minibatches, Adam at
lr 2.5e-3 (eps 1e-5) annealed linearly to 0 over the run, clip 0.2, no value-loss clipping, no KL
term, gamma 0.98, lambda 0.8, entropy coef 0, gradient norm clipped to 0.5, and separate 64-64 tanh
policy and value towers with orthogonal initialisation (gain sqrt(2) in the hidden layers, 0.01 on
the policy output, 1 on the value output, zero biases).  msrl halves the squared error in its value
loss and RLlib does not, so RLlib's ``vf_loss_coeff`` is half of msrl's ``vf_coef``.

What cannot be matched: RLlib normalises advantages once over the whole batch (msrl per minibatch);
its batch carries one masked extra step per episode chunk (the bootstrap value), so its minibatches
of 256 rows hold slightly fewer real steps; it draws its own seeds and minibatch order.  Its env
runner steps all 64 envs until at least 2,048 transitions are in (a step that only resets an env
does not count), so a batch holds 2,048 to 2,111 of them; the run ends at the first batch at or past
the budget, which can be one batch before msrl's last, its lr then not yet at 0 (1/74 of the start at 150k).

Sampling is local (``num_env_runners=0``): the env runner and the learner share this process, as
msrl's ``local`` policy does.  That was the faster layout on the 2-core VM at one torch thread:
about 42k env steps each, run alternately on a shared machine, gave 3.8k and 3.1k env steps/s
locally against 2.6k and 3.2k with one remote env runner (``num_env_runners=1``).  A remote runner
adds a process hop per batch, and its sampling cannot overlap the update, since PPO's
``training_step`` waits for one and then the other.  Local sampling also lets ``on_episode_end``
record every training episode's return in this process.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from benchmarks.harness import Stopwatch, start_ray
from benchmarks.training_speed._records import EvalSchedule, RunRecord

HIDDEN_GAIN, POLICY_GAIN, VALUE_GAIN = math.sqrt(2.0), 0.01, 1.0


def rllib_missing() -> str | None:
    """Why RLlib's PPO cannot run here (one line), or None when it can."""
    try:
        from ray.rllib.algorithms.ppo import PPOConfig  # noqa: F401
    except ImportError as exc:
        return f"RLlib skipped: ray[rllib] is not importable ({exc}); install the bench extra (`make install-bench`)"
    return None


def ray_version() -> str:
    import ray

    return str(ray.__version__)


def shipped_settings(config: Path) -> Any:
    """msrl's PPO settings in the config file ``config``: its ``algo`` section over the defaults."""
    import yaml

    from algorithms.ppo import PPOConfig

    return PPOConfig(**yaml.safe_load(config.read_text())["algo"])


def _learner_class() -> type:
    """PPO's torch learner with Adam's eps at msrl's 1e-5 (RLlib's default is torch's 1e-8)."""
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    class EpsAdamPPOLearner(PPOTorchLearner):
        def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
            params = self.get_parameters(self.module[module_id])
            self.register_optimizer(
                module_id=module_id,
                optimizer=torch.optim.Adam(params, eps=1e-5),
                params=params,
                lr_or_lr_schedule=config.lr,
            )

    return EpsAdamPPOLearner


def rllib_config(algo: Any, seed: int, budget: int, on_episode_end: Callable[..., None]) -> Any:
    """RLlib's ``PPOConfig`` for msrl's ``algorithms.ppo.PPOConfig`` ``algo`` (see the module docstring)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    batch = algo.num_envs * algo.num_steps
    iterations = -(-budget // batch)  # msrl's number of updates: the budget rounded up to whole batches
    # The learner sets the next update's lr from the env steps sampled so far, so update u runs at
    # lr * (1 - u / iterations), as msrl's linear_lr does.
    lr = [[0, algo.learning_rate], [iterations * batch, 0.0]] if algo.anneal_lr else algo.learning_rate
    return (
        PPOConfig()
        .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
        .environment(algo.env_id)
        .framework("torch")
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=algo.num_envs,
            rollout_fragment_length=algo.num_steps,
        )
        .learners(num_learners=0, learner_class=_learner_class())
        .training(
            train_batch_size_per_learner=batch,
            minibatch_size=batch // algo.num_minibatches,
            num_epochs=algo.update_epochs,
            lr=lr,
            gamma=algo.gamma,
            lambda_=algo.gae_lambda,
            clip_param=algo.clip_coef,
            vf_clip_param=float("inf"),
            vf_loss_coeff=0.5 * algo.vf_coef,
            entropy_coeff=algo.ent_coef,
            use_kl_loss=False,
            grad_clip=algo.max_grad_norm,
            grad_clip_by="global_norm",
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[algo.hidden_size, algo.hidden_size],
                fcnet_activation="tanh",
                fcnet_kernel_initializer="orthogonal_",
                fcnet_kernel_initializer_kwargs={"gain": HIDDEN_GAIN},
                fcnet_bias_initializer="zeros_",
                vf_share_layers=False,
            )
        )
        .callbacks(on_episode_end=on_episode_end)
        .debugging(seed=seed, log_level="ERROR")
    )


def _init_heads(learner: Any) -> None:
    """The learner's output layers as msrl initialises them (RLlib's PPO catalog leaves them at
    torch's default); the env runners get them with the next weight sync."""
    for module in learner.module.values():
        for head, gain in ((module.pi, POLICY_GAIN), (module.vf, VALUE_GAIN)):
            layers = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
            with torch.no_grad():
                torch.nn.init.orthogonal_(layers[-1].weight, gain)
                torch.nn.init.zeros_(layers[-1].bias)


def greedy_returns(module: Any, env_id: str, episodes: int, seed: int) -> list[float]:
    """One greedy episode in each of ``episodes`` fresh environments seeded ``seed``, ``seed + 1``, ...:
    the argmax of the policy's logits, all environments stepped as one batch."""
    envs = [gym.make(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    returns, running = np.zeros(episodes), np.ones(episodes, dtype=bool)
    with torch.no_grad():
        while running.any():
            logits = module.forward_inference({"obs": torch.as_tensor(obs, dtype=torch.float32)})["action_dist_inputs"]
            actions = logits.argmax(-1).numpy()
            for i in np.flatnonzero(running):
                obs[i], reward, terminated, truncated, _ = envs[i].step(int(actions[i]))
                returns[i] += float(reward)
                running[i] = not (terminated or truncated)
    for env in envs:
        env.close()
    return [float(r) for r in returns]


def train_rllib(algo: Any, seed: int, budget: int, eval_every: int, eval_episodes: int, eval_seed: int) -> RunRecord:
    """Train RLlib's PPO one ``train()`` (one 2,048-step batch and its update) at a time until the
    budget is spent, recording every training episode's return from the ``on_episode_end`` callback.

    Building the algorithm happens before the clock starts, as SB3's model construction and msrl's
    tracing do.  Ray is started first if it is not running yet (``start_ray``)."""
    start_ray()
    record, clock = RunRecord("RLlib", seed), Stopwatch()
    ended: list[float] = []

    def on_episode_end(*, episode: Any, prev_episode_chunks: Any = None, **_: Any) -> None:
        ended.append(float(episode.get_return() + sum(c.get_return() for c in prev_episode_chunks or ())))

    trainer = rllib_config(algo, seed, budget, on_episode_end).build_algo()
    try:
        trainer.learner_group.foreach_learner(_init_heads)
        trainer.env_runner_group.sync_weights(from_worker_or_learner_group=trainer.learner_group)
        module = trainer.get_module()  # the env runner's copy, which the learner's weights reach after each update
        schedule = EvalSchedule(
            record, clock, eval_every, lambda: greedy_returns(module, algo.env_id, eval_episodes, eval_seed)
        )
        clock.start()
        while record.env_steps < budget:
            result = trainer.train()
            record.env_steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
            record.iterations += 1
            record.add_episodes(record.env_steps, clock.seconds, ended)
            ended.clear()
            schedule.maybe_evaluate(record.env_steps)
        clock.stop()
        schedule.finish()
    finally:
        trainer.stop()
    return record
