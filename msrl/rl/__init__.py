"""Pieces RL algorithms share, written once and tested against reference formulas: returns (GAE,
n-step, V-trace), buffers (rollout, replay, prioritized replay, a replay of stacked frames that stores each frame once:
``FrameReplayBuffer``, and a replay of whole multi-agent episodes: ``EpisodeReplay``), action heads
(categorical, diagonal Gaussian, tanh-Gaussian), the actor-critic network, actor and loss of the
on-policy algorithms, the networks a config names (``algo.network``: ``mlp``, ``nature_cnn``,
``impala_cnn`` or a user's ``module:Class`` torso), Polyak averaging, the recurrent actor-critic of
rMAPPO (``RecurrentActorCritic``),
running mean/std normalisation and value-target normalisation (``ValueNorm``), PPO's update
(``clipped_surrogate``, ``ppo_epochs``, ``linear_lr``), and the one way a learner's update and an
actor's draw run fast: ``GradientStep`` (a loss, its gradient, ``clip_grad_norm_`` and a
``torch.optim`` optimizer, eager or as one compiled region) and ``CompiledCall``, both on
``CompiledRegion``, which the run switches to between iterations (``switch_compiled``) once built.
The rollout buffer takes agent groups, so PPO and MAPPO share it.  Algorithms import them instead
of copying them."""

from msrl.rl._actor_critic import (
    OBS_STATS,
    ActorCritic,
    ActorCriticActor,
    ActorCriticNet,
    as_observation,
    check_activation,
    obs_stats_weights,
)
from msrl.rl._categorical import categorical_noise, one_hot, sample_categorical
from msrl.rl._compiled import (
    CompiledRegion,
    check_compile_option,
    compile_option,
    compiling,
    region_key,
    switch_compiled,
    wait_for_builds,
)
from msrl.rl._compiled_call import CompiledCall
from msrl.rl._episode_replay import EpisodeBatch, EpisodeReplay
from msrl.rl._frame_replay import FrameReplayBuffer
from msrl.rl._gae import gae, normalize_advantages
from msrl.rl._heads import (
    CategoricalHead,
    GaussianHead,
    gaussian_entropy,
    gaussian_log_prob,
    orthogonal_,
    sample_tanh_gaussian,
)
from msrl.rl._mlp import QFunctions, mlp
from msrl.rl._networks import (
    NETWORKS,
    CategoricalQ,
    DuelingQ,
    ImpalaCNN,
    NatureCNN,
    SharedActorCritic,
    actor_critic,
    categorical_projection,
    check_network,
    q_network,
)
from msrl.rl._normalize import RewardScaler, RunningMeanStd
from msrl.rl._nstep import NStepReturns
from msrl.rl._policy_gradient import actor_critic_loss
from msrl.rl._polyak import polyak_update_
from msrl.rl._ppo import clipped_surrogate, ppo_epochs
from msrl.rl._prioritized import PrioritizedBatch, PrioritizedFrameReplayBuffer, PrioritizedReplayBuffer, SumTree
from msrl.rl._recurrent import RecurrentActorCritic
from msrl.rl._replay import ReplayBatch, ReplayBuffer, keeps_final_obs
from msrl.rl._returns import nstep_returns, vtrace
from msrl.rl._rollout import GROUP_SEPARATOR, RolloutBatch, RolloutBuffer, TrajectoryBatch, flat_groups, group_batches
from msrl.rl._schedule import linear_lr
from msrl.rl._spaces import action_layout, check_action_space, observation_dtype, observation_shape
from msrl.rl._state import copy_weights, load_generator_state, load_state, load_weights, save_state
from msrl.rl._update import FUNCTIONAL_OPTIMIZERS, GradientStep, clip_grad_norm_
from msrl.rl._value_norm import ValueNorm

__all__ = [
    "one_hot",
    "NStepReturns",
    "CategoricalQ",
    "categorical_projection",
    "DuelingQ",
    "PrioritizedBatch",
    "PrioritizedFrameReplayBuffer",
    "PrioritizedReplayBuffer",
    "SumTree",
    "QFunctions",
    "NETWORKS",
    "ActorCriticNet",
    "ImpalaCNN",
    "NatureCNN",
    "SharedActorCritic",
    "actor_critic",
    "as_observation",
    "check_network",
    "observation_dtype",
    "q_network",
    "RecurrentActorCritic",
    "CompiledCall",
    "CompiledRegion",
    "FUNCTIONAL_OPTIMIZERS",
    "GradientStep",
    "compile_option",
    "compiling",
    "region_key",
    "switch_compiled",
    "wait_for_builds",
    "check_compile_option",
    "GROUP_SEPARATOR",
    "OBS_STATS",
    "ActorCritic",
    "ActorCriticActor",
    "CategoricalHead",
    "GaussianHead",
    "EpisodeBatch",
    "EpisodeReplay",
    "FrameReplayBuffer",
    "ReplayBatch",
    "ReplayBuffer",
    "keeps_final_obs",
    "RewardScaler",
    "RolloutBatch",
    "RolloutBuffer",
    "RunningMeanStd",
    "TrajectoryBatch",
    "ValueNorm",
    "action_layout",
    "actor_critic_loss",
    "categorical_noise",
    "check_action_space",
    "check_activation",
    "clip_grad_norm_",
    "clipped_surrogate",
    "copy_weights",
    "flat_groups",
    "gae",
    "gaussian_entropy",
    "gaussian_log_prob",
    "group_batches",
    "linear_lr",
    "load_generator_state",
    "load_state",
    "load_weights",
    "mlp",
    "normalize_advantages",
    "nstep_returns",
    "obs_stats_weights",
    "observation_shape",
    "orthogonal_",
    "polyak_update_",
    "ppo_epochs",
    "sample_categorical",
    "sample_tanh_gaussian",
    "save_state",
    "vtrace",
]
