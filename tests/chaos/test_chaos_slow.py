"""The long chaos cases, left out of CI (``-m slow``): a killed learner and a stopped
(SIGSTOP) worker, each recovered from as if nothing happened; a rollout worker killed twice at
random iterations of a full PPO CartPole run,
which still reaches the threshold; twenty learner kills at random moments, mid-iteration included,
none of which hangs; and a node of a simulated multi-node cluster removed under a running fragment."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from test_worker_faults import COMMON, STEPS_PER_ITERATION, _learning, _signal_between

import msrl
from msrl.app import Trainer, read_metrics

pytestmark = pytest.mark.slow

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml")
COARSE = ["progress=false", "policy=single_learner_coarse", "checkpoint_every=5"]
STEP_BOUND_S = 90.0
"""No step may take longer: the liveness poll and bound, closing the workers, new ones and a
checkpoint load, with room for a slow machine."""


def test_a_killed_learner_resumes_from_the_last_checkpoint(undisturbed: list[dict], tmp_path: Path) -> None:
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", *COMMON]) as trainer:
        _signal_between(trainer, {3: ("learner", signal.SIGKILL)})  # the checkpoint before it is at 2
        run_dir = trainer.run_dir
    metrics = read_metrics(run_dir)
    assert metrics[-1]["restarts"] == 1
    # one iteration past the checkpoint, or two where the learner had finished the next one
    assert metrics[-1]["lost_env_steps"] in {n * STEPS_PER_ITERATION for n in (1, 2)}
    assert _learning(metrics) == _learning(undisturbed)


def test_a_stopped_worker_is_killed_and_recovered_from_within_the_liveness_bound(
    undisturbed: list[dict], tmp_path: Path
) -> None:
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", *COMMON, "liveness_timeout_s=5"]) as trainer:
        for _ in range(3):
            trainer.step()
        os.kill(trainer.runtime.worker_pids()["rollout"][0], signal.SIGSTOP)
        # the step that waits on the stopped worker finds it silent, kills it and recovers; the one
        # right after the signal may still complete, if the worker had finished the iteration queued
        # ahead before it stopped
        for _ in range(3):
            start = time.monotonic()
            record = trainer.step()
            elapsed = time.monotonic() - start
            if record["restarts"]:
                break
        while not trainer.done:
            trainer.step()
        run_dir = trainer.run_dir
    assert record["restarts"] == 1
    # poll (2 s) + liveness bound (5 s) + new workers and the checkpoint load; never a hang
    assert elapsed < 60, f"recovering from a stopped worker took {elapsed:.0f} s"
    assert _learning(read_metrics(run_dir)) == _learning(undisturbed)


def test_a_rollout_worker_killed_twice_at_random_iterations_still_reaches_the_threshold(tmp_path: Path) -> None:
    rng = random.Random(15)
    kills = sorted(rng.sample(range(2, 28), 2))
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", *COARSE, "total_env_steps=60000", "eval_episodes=0"]) as trainer:
        while not trainer.done:
            if kills and trainer.iteration == kills[0]:
                kills.pop(0)
                os.kill(rng.choice(trainer.runtime.worker_pids()["rollout"]), signal.SIGKILL)
            trainer.step()
        trainer.run()
        evaluation = trainer.evaluate(episodes=10)
        run_dir = trainer.run_dir
    assert read_metrics(run_dir)[-1]["restarts"] == 2
    assert evaluation.mean >= 475, evaluation


def test_twenty_learner_kills_at_random_moments_never_hang(tmp_path: Path) -> None:
    """Kills land while the step runs (a timer thread), so the rollouts are blocked waiting on the
    learner's weights when it dies: a driver that waited only on them would wait forever."""
    rng = random.Random(20)
    kills = 20
    overrides = [
        f"runs_dir={tmp_path}",
        *COARSE,
        "checkpoint_every=2",
        "total_env_steps=10000000",
        "eval_episodes=0",
        f"max_restarts={kills}",
        "liveness_timeout_s=10",
    ]
    with Trainer(CONFIG, overrides) as trainer:
        done = 0
        while done < kills:
            pid = trainer.runtime.worker_pids()["learner"][0]
            timer = threading.Timer(rng.uniform(0.0, 1.0), os.kill, (pid, signal.SIGKILL))
            timer.start()
            restarts, steps_after_kill = trainer.restarts, 0
            while trainer.restarts == restarts:
                killed = not timer.is_alive()
                start = time.monotonic()
                trainer.step()
                assert time.monotonic() - start < STEP_BOUND_S, f"a step took {time.monotonic() - start:.0f} s"
                steps_after_kill += killed
                assert steps_after_kill <= 2, "two steps after the learner was killed, no restart"
            timer.join()
            done += 1
        assert trainer.restarts == kills
        trainer.step()  # and it still trains


def test_a_removed_node_is_recovered_from_on_the_nodes_left(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from cluster import loopback_only

    ray.shutdown()
    with loopback_only():
        sim = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
        try:
            doomed = sim.add_node(num_cpus=2, resources={"spare": 1})
            sim.add_node(num_cpus=2)
            sim.wait_for_nodes()
            ray.init(address=sim.address)
            overrides = [
                f"runs_dir={tmp_path}",
                *COARSE,
                "checkpoint_every=2",
                "total_env_steps=20480",
                "eval_episodes=0",
                "policy.placement=SPREAD",
                "algo.num_envs=8",
                "algo.num_steps=64",
            ]
            with Trainer(CONFIG, overrides, address=sim.address) as trainer:
                for _ in range(3):
                    trainer.step()
                nodes = {node for replicas in trainer.runtime.placement().values() for node in replicas}
                assert doomed.node_id in nodes  # SPREAD over three nodes uses the one removed next
                sim.remove_node(doomed)
                start = time.monotonic()
                record = trainer.step()
                assert time.monotonic() - start < STEP_BOUND_S
                assert record["restarts"] == 1
                after = {node for replicas in trainer.runtime.placement().values() for node in replicas}
                assert doomed.node_id not in after
                while not trainer.done:
                    trainer.step()
        finally:
            ray.shutdown()
            sim.shutdown()
    assert msrl.load(Path(trainer.run_dir) / "checkpoint.pt") is not None
