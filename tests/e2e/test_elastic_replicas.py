"""An elastic policy (``policy.actors: LO..HI``) resumed on a cluster that holds another number of
replicas than its checkpoint: the run says what it chose, each new replica loads its share of the
old ones' state, and training goes on from the checkpoint with the same per-run quantities."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import msrl
from msrl.app import Trainer, load_checkpoint

pytestmark = pytest.mark.usefixtures("shared_ray")  # the session's Ray: 4 logical CPUs a core

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")
STEPS = 8 * 32  # env steps an iteration
COMMON = [
    "progress=false",
    "eval_episodes=0",
    "algo.num_envs=8",
    "algo.num_steps=32",
    "algo.compile=false",
    f"total_env_steps={6 * STEPS}",
]


@pytest.mark.parametrize(
    ("before", "elastic", "after"),
    [
        pytest.param(1, "1..2", 2, marks=pytest.mark.landing),  # grown; two Ray runs: about 30 s
        pytest.param(4, "1..2", 2, marks=pytest.mark.slow),  # shrunk
    ],
)
def test_a_resumed_elastic_run_regroups_its_replicas_and_goes_on(
    before: int, elastic: str, after: int, tmp_path: Path
) -> None:
    fixed = [f"runs_dir={tmp_path}", "policy=single_learner_coarse", f"policy.actors={before}", *COMMON]
    with Trainer(CONFIG, fixed, stream=io.StringIO()) as trainer:
        for _ in range(4):
            trainer.step()
        trainer.save()
        checkpoint = Path(trainer.run_dir) / "checkpoint.pt"
    saved = load_checkpoint(str(checkpoint))
    assert len(saved["components"]["_replicas"]["rollout"]) == before

    stream = io.StringIO()
    run = msrl.train(None, [f"policy.actors={elastic}"], resume=str(checkpoint), stream=stream)

    # the cluster holds the most of the range (a learner's CPU and `after` actors' of its 8): said at start
    assert f"msrl: elastic policy: rollout {after} of {elastic} replicas, as the cluster holds" in stream.getvalue()
    resumed = [record for record in run.metrics if record["iteration"] > 4]
    assert [record["iteration"] for record in resumed] == [5, 6]
    assert [record["env_steps"] for record in resumed] == [5 * STEPS, 6 * STEPS]  # 8 environments, as before
    assert all(record["replicas/rollout"] == after for record in resumed)
    ended = load_checkpoint(str(checkpoint))
    assert len(ended["components"]["_replicas"]["rollout"]) == after
    # the learner went on from the checkpoint: two more iterations of updates on top of four
    assert ended["components"]["learner"]["updates"] == saved["components"]["learner"]["updates"] * 6 // 4
