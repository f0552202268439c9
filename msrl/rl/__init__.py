"""Pieces RL algorithms share, written once: GAE, a rollout buffer component,
categorical sampling.  Algorithms import them instead of copying them."""

from msrl.rl._categorical import categorical_entropy, categorical_log_prob, sample_categorical
from msrl.rl._gae import gae
from msrl.rl._rollout import RolloutBatch, RolloutBuffer

__all__ = ["RolloutBatch", "RolloutBuffer", "categorical_entropy", "categorical_log_prob", "gae", "sample_categorical"]
