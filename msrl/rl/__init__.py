"""Pieces RL algorithms share, written once: GAE, a rollout buffer component, categorical
sampling, PPO's losses, a fused actor-critic network and its gradient clipping.  Algorithms import
them instead of copying them."""

from msrl.rl._categorical import categorical_entropy, categorical_log_prob, sample_categorical
from msrl.rl._clip import clip_grad_norm_
from msrl.rl._gae import gae
from msrl.rl._ppo_loss import ppo_losses
from msrl.rl._rollout import RolloutBatch, RolloutBuffer
from msrl.rl._twin_mlp import TwinMLP

__all__ = [
    "RolloutBatch", "RolloutBuffer", "TwinMLP", "categorical_entropy", "categorical_log_prob", "clip_grad_norm_", "gae",
    "ppo_losses", "sample_categorical",
]
