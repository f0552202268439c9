"""DQN with prioritized replay, its replay in the rollout fragment (``single_learner_coarse``) or in
a sharded fragment of its own fed by the acting replicas: each replay replica gets back the TD errors
of the rows it sampled (a replay checks their shape against its last sample), so after training every
replica's priorities differ from the largest one new transitions enter at.  Ape-X DQN in a replay
fragment of its own: the acting replicas' values cross with every step, so transitions enter at their
own TD errors and almost every row's priority differs from every other's."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from msrl.app import Trainer

pytestmark = [pytest.mark.usefixtures("shared_ray"), pytest.mark.landing]  # two Ray workers and a learner: ~20 s

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


OWN_FRAGMENT = (
    "policy={fragments: [{name: acting, components: [env, actor], replicas: 2, resources: {CPU: 0.5}},"
    " {name: replay, components: [buffer], replicas: 2, resources: {CPU: 0.5}}, {name: learn, components: [learner]}]}"
)


@pytest.mark.parametrize(
    ("config", "placement", "replay"),
    [
        ("dqn_cartpole", ["policy=single_learner_coarse", "policy.actors=2"], "rollout"),
        ("dqn_cartpole", [OWN_FRAGMENT], "replay"),
        ("apex_dqn_cartpole", [OWN_FRAGMENT], "replay"),
    ],
    ids=["in-the-rollouts", "own-fragment", "apex-own-fragment"],
)
def test_priorities_come_back_to_each_replay_replica(
    config: str, placement: list[str], replay: str, tmp_path: Path
) -> None:
    overrides = [
        f"runs_dir={tmp_path}",
        "progress=false",
        "eval_episodes=0",
        "algo.compile=false",
        "algo.prioritized_replay=true",
        "algo.learning_starts=500",
        "total_env_steps=3000",
        *placement,
    ]
    with Trainer(str(CONFIGS / f"{config}.yaml"), overrides, stream=io.StringIO()) as trainer:
        while not trainer.done:
            record = trainer.step()
        state = trainer.runtime.state_dict()
    assert record["td_loss"] > 0
    assert len(state["_replicas"][replay]) == 2
    for replica in state["_replicas"][replay]:
        buffer = replica["buffer"]
        priorities = buffer["priorities"][: buffer["size"]]
        top = buffer["max_priority"] ** 0.6  # alpha
        assert buffer["size"] > 0 and bool((priorities < top * 0.999).any()), priorities
        assert torch.isfinite(priorities).all()
        if config == "apex_dqn_cartpole":  # each entered at its own TD error, not at a shared largest one
            assert len(set(priorities.tolist())) > 0.9 * buffer["size"], priorities
