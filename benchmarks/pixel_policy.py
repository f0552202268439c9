"""How far has a pixel policy moved from uniform, and how much of its torso does it use?

For each checkpoint of an actor-critic on frames (PPO, A2C or IMPALA with ``network: nature_cnn``
or ``impala_cnn``), the trained network is loaded (``msrl.load``) and shown the same frames: its
config's environment, ``--envs`` games stepped with uniformly random actions from ``--seed``, every
``--every``-th step kept.  Printed per checkpoint:

* the policy's entropy, averaged over the frames (ln of the action count when it is uniform);
* how much its logits vary across frames (their standard deviation over frames, averaged over
  actions): near zero, the policy plays the same distribution whatever it sees;
* the fraction of the torso's output features that are zero on every frame (ReLU units that no
  frame reaches: the share of the representation lost to the policy and the value alike);
* the value's mean and standard deviation over the frames.

    python -m benchmarks.pixel_policy runs/impala_atari/checkpoint.pt runs/ppo_atari/checkpoint.pt
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np
import torch

import msrl
import msrl.envs
from benchmarks.harness import table_head, table_row

COLUMNS = ("checkpoint", "entropy", "logit std across frames", "features never active", "value mean", "value std")


def frames(env_id: str, env_kwargs: dict, num_envs: int, steps: int, every: int, seed: int) -> torch.Tensor:
    """Frames of ``num_envs`` games under uniformly random actions, every ``every``-th step."""
    env = msrl.envs.make(env_id, num_envs, seed=seed, **env_kwargs)
    actions = int(env.action_space.n)
    rng, kept, obs = np.random.default_rng(seed), [], env.observe()
    for step in range(steps):
        if step % every == 0:
            kept.append(torch.as_tensor(np.array(obs)))
        obs = env.step(rng.integers(0, actions, num_envs))[0]
    env.close()
    return torch.cat(kept)


@torch.no_grad()
def measure(checkpoint: str, num_envs: int, steps: int, every: int, seed: int) -> dict[str, float]:
    algorithm = msrl.load(checkpoint)
    net = getattr(getattr(algorithm, "learner", None), "net", None)
    if not all(hasattr(net, part) for part in ("torso", "head", "critic")):
        raise SystemExit(f"msrl: error: {checkpoint} holds no actor-critic on a convolutional torso")
    config = algorithm.config
    obs = frames(config.env_id, dict(config.env_kwargs), num_envs, steps, every, seed)
    features = net.torso(obs)
    dist = net.head(features)
    logits = dist.logits if hasattr(dist, "logits") else dist
    probs = torch.softmax(logits, -1)
    value = net.critic(features).squeeze(-1)
    return {
        "entropy": float(-(probs * probs.clamp_min(1e-12).log()).sum(-1).mean()),
        "logit std across frames": float(logits.std(0).mean()),
        "features never active": float(((features > 0).sum(0) == 0).float().mean()),
        "value mean": float(value.mean()),
        "value std": float(value.std()),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="checkpoint.pt files of pixel actor-critic runs")
    parser.add_argument("--envs", type=int, default=8, help="games stepped together (default 8)")
    parser.add_argument("--steps", type=int, default=300, help="random steps of each game (default 300)")
    parser.add_argument("--every", type=int, default=3, help="keep every N-th step's frames (default 3)")
    parser.add_argument("--seed", type=int, default=3, help="seed of the games and the actions (default 3)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(table_head(COLUMNS))
    for path in args.checkpoints:
        row = measure(path, args.envs, args.steps, args.every, args.seed)
        print(table_row([path, *(f"{row[c]:.3f}" for c in COLUMNS[1:])]))
    print(f"\nuniform policy entropy over n actions: ln n (Pong's 6: {math.log(6):.3f})")


if __name__ == "__main__":
    main()
