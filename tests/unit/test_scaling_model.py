"""docs/scaling.md's cost model (benchmarks/multihost_scaling/model.py): its counts follow the shipped
config and network, its fit recovers the constants it was given, and its predictions behave as the
document says (a single learner saturates, a ring all-reduce's latency grows with the hosts)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from benchmarks.multihost_scaling import model
from msrl.core import Box, Discrete
from msrl.rl import ActorCritic, actor_critic

REPO = Path(__file__).resolve().parents[2]


def test_the_workload_counts_the_shipped_networks_parameters() -> None:
    net = ActorCritic(4, Discrete(2), 64)  # CartPole: 4 observations, 2 actions
    assert model.Workload().params == sum(p.numel() for p in net.parameters())


def test_the_atari_workload_counts_the_shipped_configs_network_and_uint8_frames() -> None:
    """configs/ppo_atari.yaml: the Nature-CNN actor-critic of 6 Pong actions, and a rollout step
    that carries its 4x84x84 observation as one byte a pixel."""
    config = yaml.safe_load((REPO / "configs" / "ppo_atari.yaml").read_text())["algo"]
    w = model.WORKLOADS["ppo_atari"]
    assert (w.num_envs, w.num_steps, w.epochs, w.minibatches) == (
        config["num_envs"],
        config["num_steps"],
        config["update_epochs"],
        config["num_minibatches"],
    )
    frames = Box(low=0, high=255, shape=(4, 84, 84), dtype="uint8")
    net = actor_critic("nature_cnn", frames, Discrete(6), 0, None)
    assert w.params == sum(p.numel() for p in net.parameters())
    assert w.step_bytes == 4 * 84 * 84 + 8 + 4 + 4 + 4 + 1
    # fine moves the frames of every step; coarse the same frames once, and the weights
    fine, coarse = (model.traffic(p, 2, w) for p in ("single_learner_fine", "single_learner_coarse"))
    assert fine.bytes == 128 * 8 * (4 * 84 * 84 + 13)
    assert coarse.bytes == 2 * 4 * w.params + 8 * 128 * w.step_bytes


def test_coarse_sends_weights_out_and_rollouts_in_through_the_learner() -> None:
    w = model.Workload()
    t = model.traffic("single_learner_coarse", 2, w)
    assert t.bytes == 2 * 4 * w.params + 64 * 32 * w.step_bytes
    assert (t.calls, t.ring_steps, t.trips) == (2 * 2 + 2, 0, 4)
    # a replica on the learner's host costs a message but no bytes on the wire
    assert model.traffic("single_learner_coarse", 2, w, remote=1).bytes == pytest.approx(t.bytes / 2)


def test_fine_pays_two_messages_per_step_and_replica() -> None:
    for replicas in (2, 4):
        t = model.traffic("single_learner_fine", replicas)
        assert t.calls == 2 * replicas * 32 + 2 and t.trips == 2 * 32 + 2


def test_the_ring_all_reduce_moves_twice_the_gradient_less_a_share() -> None:
    w = model.Workload()
    for replicas in (2, 4, 64):
        t = model.traffic("multi_learner", replicas, w)
        assert t.ring_steps == 4 * 8 * 2 * (replicas - 1)
        assert t.bytes == pytest.approx(4 * 8 * 2 * 2 * (replicas - 1) / replicas * 4 * w.params)


def test_the_fit_recovers_the_constants_the_rows_were_made_with() -> None:
    truth = model.Constants(alpha=2e-3, alpha_ring=3e-4)
    rows = []
    for preset in ("single_learner_coarse", "single_learner_fine", "multi_learner", "gpu_only"):
        for replicas in (2, 4):
            for profile in ("none", "1gbit-0.5ms", "100mbit-2ms"):
                t = model.traffic(preset, replicas)
                comm = model.communication(t, model.Link(model.RATES[profile]), truth)
                placement = "; ".join(f"fragment rollout[{i}] on node 10.0.0.{i + 1} (x)" for i in range(replicas))
                if preset != "multi_learner":
                    placement += "; fragment learner[0] on node 10.0.0.99 (x)"
                host = {"rx_bytes": t.bytes / 2, "tx_bytes": t.bytes / 2}
                rows.append(
                    {"preset": preset, "replicas": replicas, "hosts": replicas, "profile": profile,
                     "communication_s": comm, "compute_s": 0.1, "iteration_s": 0.1 + comm, "per_host": [host],
                     "placement": placement, "tbf_burst": 3028}
                )  # fmt: skip
    fitted = model.fit(rows)
    assert fitted.alpha == pytest.approx(truth.alpha) and fitted.alpha_ring == pytest.approx(truth.alpha_ring)
    assert all(abs(model.check(row, fitted)["time_error"]) < 1e-9 for row in rows)
    # Runs that applied their profile's delay (netem, or the testbed's relay) paid it on every trip,
    # host to host across two shaped links: twice the profile's; the fit takes it out again.
    delayed = []
    for row in rows:
        t = model.traffic(row["preset"], row["replicas"])
        extra = t.trips * 2 * model.DELAYS[row["profile"]]
        delayed.append({**row, "delay_applied": True, "communication_s": row["communication_s"] + extra,
                        "iteration_s": row["iteration_s"] + extra})  # fmt: skip
    assert any(model.delay(row) for row in delayed) and not any(model.delay(row) for row in rows)
    again = model.fit(delayed)
    assert again.alpha == pytest.approx(truth.alpha) and again.alpha_ring == pytest.approx(truth.alpha_ring)
    assert all(abs(model.check(row, again)["time_error"]) < 1e-9 for row in delayed)
    assert model.fit([{**row, "delay_applied": False} for row in delayed]).alpha > 1.2 * truth.alpha  # blind to it


def test_predictions_a_single_learner_saturates_and_a_ring_stops_scaling() -> None:
    k = model.Constants(alpha=1e-3, alpha_ring=1e-4)
    c = model.Compute(per_env_step=20e-6, per_infer_step=30e-6, per_sample=100e-6)
    link = model.Link(10e9, 0.2e-3)

    def steps(preset: str, hosts: int) -> float:
        return model.predict(preset, hosts, link, k, c)["steps_per_s"]

    # one learner learns every sample: its throughput tends to 1/per_sample, whatever the hosts
    assert steps("single_learner_coarse", 512) < 1 / c.per_sample < 2 * steps("single_learner_coarse", 64)
    # each replica learns its own share: more hosts help until the ring's 2(H-1) steps dominate
    assert steps("multi_learner", 8) > 2 * steps("multi_learner", 2)
    assert steps("multi_learner", 512) < steps("multi_learner", 64) * 512 / 64 / 4
    # one fragment does not spread
    assert steps("gpu_only", 512) == steps("gpu_only", 8)
    assert math.isfinite(steps("single_learner_fine", 512))
