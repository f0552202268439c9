"""The cost model of a fragmented graph (``fragments.predict``): derived from the traced graph and
one calibration of the unsplit run, it counts what every policy sends as the hand-written PPO
CartPole model of docs/scaling.md does, and prices it the same way; placements that a cluster
cannot host are refused with the reason."""

from __future__ import annotations

import dataclasses
import math

import pytest

import fragments
import policies
from benchmarks.multihost_scaling import model as hand
from msrl.app import load_config, plan
from msrl.core import ConfigError, trace

CONFIG = "configs/ppo_cartpole.yaml"


@pytest.fixture(scope="module")
def cartpole() -> tuple[fragments.BuildRecipe, object, fragments.Calibration]:
    """The shipped PPO CartPole config's recipe, traced graph and a one-iteration calibration."""
    recipe = plan(load_config(CONFIG)).recipe
    graph = trace(fragments.declare(recipe))
    calibration = fragments.calibrate(recipe, policies.load_policy("local"), iterations=1)
    return recipe, graph, calibration


def _fdg(graph, spec):
    return fragments.partition(graph, policies.load_policy(spec))


def test_a_link_reads_a_rate_and_a_one_way_delay_and_a_bad_one_names_the_forms() -> None:
    assert fragments.Link.parse("1gbit/0.5ms") == fragments.Link(1e9, 0.5e-3)
    assert fragments.Link.parse("100mbit/2ms") == fragments.Link(100e6, 2e-3)
    assert fragments.Link.parse("10gbit") == fragments.Link(10e9, 0.0)
    assert fragments.Link.parse("none") == fragments.Link()
    for bad in ("1 gigabit", "fast", "0mbit", "2parsecs"):
        with pytest.raises(ConfigError, match="valid forms|must be positive"):
            fragments.Link.parse(bad)


def test_the_calibration_measures_every_call_and_the_bytes_each_value_takes(cartpole) -> None:
    _, graph, cal = cartpole
    calls = {n.name for n in graph.nodes if n.component is not None}
    assert calls <= set(cal.node_seconds) and all(s >= 0 for s in cal.node_seconds.values())
    assert cal.env_steps == 64 * 32  # the config's 64 envs x 32 steps
    weights = cal.output_bytes["learner.get_weights"][0]
    assert weights == 4 * hand.Workload().params  # the float32 weights of docs/scaling.md's 9,155 parameters
    assert cal.allreduces == 4 * 8  # 4 epochs of 8 minibatches: one gradient all-reduce each
    assert cal.allreduce_bytes == cal.allreduces * weights
    assert set(cal.half_node_seconds) == set(cal.node_seconds)  # every node measured at half the run too


def _pure_communication(cal: fragments.Calibration) -> fragments.Calibration:
    """``cal`` with no compute at all: the predicted iteration is its communication alone."""
    return dataclasses.replace(
        cal, node_seconds=dict.fromkeys(cal.node_seconds, 0.0), half_node_seconds={}, iteration_s=1e-12
    )


@pytest.mark.parametrize(
    ("spec", "preset"),
    [
        ({"preset": "single_learner_coarse", "actors": 2}, "single_learner_coarse"),
        ({"preset": "single_learner_fine", "envs": 2}, "single_learner_fine"),
        ({"preset": "multi_learner", "learners": 2}, "multi_learner"),
    ],
)
def test_the_hand_written_ppo_cartpole_model_is_one_case_of_the_general_one(cartpole, spec, preset) -> None:
    """Three hosts of one CPU, each replica on a host of its own: the messages and the all-reduce's
    bytes are the hand model's counts; the rollout's bytes are the hand model's formulas with what
    msrl's values really weigh (40 bytes a step where the hand model counts 37, and 36 a
    fine-grained step where it counts 29); and the iteration, with no compute, is the hand model's
    communication time for those bytes."""
    _, graph, cal = cartpole
    link = fragments.Link(1e9, 0.5e-3)
    shape = fragments.ClusterShape(hosts=3, cores=1.0, link=link)
    alpha, ring, header = 1.8e-3, 0.1e-3, 1400.0
    # the hand model's driver is a call and its reply across the link (the walk adds their delay) and
    # its ring step pays one delay
    constants = fragments.CostConstants(
        message_s=alpha, ring_step_s=ring, driver_s=2 * alpha, header_bytes=header, ring_step_delays=1.0
    )
    fdg = _fdg(graph, spec)
    got = fragments.predict(fdg, _pure_communication(cal), shape, constants)
    assert got.feasible and len(set(got.placement.values())) == (2 if preset == "multi_learner" else 3)
    want = hand.traffic(preset, 2)
    # fine: the hand model leaves out the iteration's first observations (env.observe), one message
    # from each env replica
    observe = 2 if preset == "single_learner_fine" else 0
    assert got.traffic["busiest_messages"] + 2 == want.calls + observe  # the hand model counts the driver's 2
    payload = got.traffic["busiest_host_bytes"] - header * got.traffic["busiest_messages"]
    envs, steps, weights = 64, 32, 4 * hand.Workload().params
    msrl_bytes = {  # the hand model's formulas with the sizes msrl's values have
        # weights to each actor, and each step's obs 16, int64 action 8, log-prob, value, reward, done 4 each
        "single_learner_coarse": 2 * weights + envs * steps * (16 + 8 + 4 + 4 + 4 + 4),
        # each step: obs 16, reward 4, terminated 4, truncated 4 up, int64 action 8 down; the first obs
        "single_learner_fine": envs * steps * (16 + 4 + 4 + 4 + 8) + envs * 16,
        "multi_learner": want.bytes,
    }
    assert payload == pytest.approx(msrl_bytes[preset], rel=1e-9)
    hand_time = hand.communication(
        dataclasses.replace(want, bytes=payload),
        hand.Link(link.rate_bits, link.delay_s),
        hand.Constants(alpha, ring, header),
    )
    assert got.iteration_s == pytest.approx(hand_time, rel=0.1)


def test_replicas_run_their_share_and_a_busy_host_stretches_them(cartpole) -> None:
    """Two learners each learn half the batch: the part of ``learn`` that shrinks with the share
    halves; on a host of one core two replicas take turns."""
    _, graph, cal = cartpole
    fdg = _fdg(graph, {"preset": "multi_learner", "learners": 2})
    bare = fragments.CostConstants(ray_cores=0.0)
    roomy = fragments.predict(fdg, cal, fragments.ClusterShape(hosts=1, cores=2.0), bare)
    cramped = fragments.predict(fdg, cal, fragments.ClusterShape(hosts=1, cores=1.0, cpus=math.inf), bare)
    share = cal.share_seconds("learner.learn", 2)
    whole = cal.node_seconds["learner.learn"]
    assert share <= whole and share >= whole / 2
    assert cramped.fragment_busy["worker"] == pytest.approx(2 * roomy.fragment_busy["worker"], rel=1e-6)
    # Ray's own processes take part of the host from the replicas, never from an in-process run
    with_ray = fragments.predict(
        fdg, cal, fragments.ClusterShape(hosts=1, cores=2.0), fragments.CostConstants(ray_cores=0.5)
    )
    assert with_ray.fragment_busy["worker"] == pytest.approx(roomy.fragment_busy["worker"] * 2 / 1.5, rel=1e-6)
    local = _fdg(graph, "local")
    k = fragments.CostConstants(ray_cores=0.5)
    alone = fragments.predict(local, cal, fragments.ClusterShape(hosts=1, cores=1.0), k)
    assert alone.iteration_s == pytest.approx(cal.iteration_s + k.record_s, rel=1e-6)


def test_hosts_that_share_one_machines_cores_take_turns_on_them(cartpole) -> None:
    """Two learners on two hosts of their own compute at once; on two namespaces of a one-core
    machine (the testbed) they share its core."""
    _, graph, cal = cartpole
    fdg = _fdg(graph, {"preset": "multi_learner", "learners": 2, "placement": "STRICT_SPREAD"})
    bare = fragments.CostConstants(ray_cores=0.0)
    apart = fragments.predict(fdg, cal, fragments.ClusterShape(hosts=2, cores=1.0), bare)
    together = fragments.predict(fdg, cal, fragments.ClusterShape(hosts=2, cores=1.0, shared_cores=1.0), bare)
    assert set(apart.placement.values()) == set(together.placement.values()) == {0, 1}
    assert together.fragment_busy["worker"] == pytest.approx(2 * apart.fragment_busy["worker"], rel=1e-6)


def test_a_ring_step_between_hosts_pays_its_delays_and_the_driver_a_round_trip(cartpole) -> None:
    """Two learners on two hosts: each of the 2(R-1) steps of every all-reduce pays
    ``ring_step_delays`` one-way delays, and the driver's call and reply cross the link once each."""
    _, graph, cal = cartpole
    fdg = _fdg(graph, {"preset": "multi_learner", "learners": 2, "placement": "STRICT_SPREAD"})
    link = fragments.Link(math.inf, 1e-3)
    shape = fragments.ClusterShape(hosts=2, cores=1.0, link=link)
    delays = {}
    for per_step in (1.0, 3.0):
        k = fragments.CostConstants(ring_step_delays=per_step)
        delays[per_step] = fragments.predict(fdg, _pure_communication(cal), shape, k).communication["delay"]
    steps = 2 * (2 - 1) * cal.allreduces
    assert delays[1.0] == pytest.approx(steps * link.delay_s + 2 * link.delay_s, rel=1e-6)
    assert delays[3.0] - delays[1.0] == pytest.approx(2 * steps * link.delay_s, rel=1e-6)


def test_an_async_rollout_waits_for_the_weights_it_may_lag_to_arrive(cartpole) -> None:
    """An async rollout starts an iteration once the weights it may lag behind have crossed the
    link. Two hosts, the learner on the driver's (no round trip of the driver's on the link), a
    rollout on the other, 50 ms each way: a learner slower than the weights' trip, the rollout and
    its data's trip hides them; a quicker one waits for them, for half of them an iteration (the
    rollout runs one iteration ahead) less its own update."""
    _, graph, cal = cartpole
    fdg = _fdg(graph, {"preset": "async_single_learner", "actors": 2, "placement": "SPREAD"})
    k = fragments.CostConstants()
    d = 50e-3
    near = fragments.ClusterShape(hosts=2, cores=4.0, link=fragments.Link(math.inf, 0.0))
    far = fragments.ClusterShape(hosts=2, cores=4.0, link=fragments.Link(math.inf, d))
    growth = {}
    for learn_s in (1.0, 1e-3):
        # the calibration's values and messages, with set times: 10 ms of env steps, the update
        seconds = {**dict.fromkeys(cal.node_seconds, 0.0), "env.step": 10e-3, "learner.learn": learn_s}
        timed = dataclasses.replace(
            cal,
            node_seconds=seconds,
            half_node_seconds={node: value / 2 for node, value in seconds.items()},
            iteration_s=sum(seconds.values()),
        )
        quick, slow = (fragments.predict(fdg, timed, shape, k) for shape in (near, far))
        assert slow.placement["learner[0]"] == 0 and slow.placement["rollout[1]"] == 1
        growth[learn_s] = slow.iteration_s - quick.iteration_s
    assert abs(growth[1.0]) < 1e-3
    assert growth[1e-3] == pytest.approx(d, rel=0.2)  # half the round trip: the rollout runs one ahead


def test_a_cluster_that_cannot_host_a_policy_says_what_it_needs(cartpole) -> None:
    _, graph, cal = cartpole
    small = fragments.ClusterShape(hosts=1, cores=2.0)  # a real cluster: 2 CPUs offered, no more
    got = fragments.predict(
        _fdg(graph, {"preset": "single_learner_coarse", "actors": 4}), cal, small, fragments.CostConstants()
    )
    assert not got.feasible and "needs 5 CPUs" in got.reason and "1 x 2 CPUs" in got.reason
    gpu = fragments.predict(_fdg(graph, {"preset": "gpu_only"}), cal, small, fragments.CostConstants())
    assert not gpu.feasible and "GPU" in gpu.reason


def test_async_hides_the_rollout_behind_the_learner(cartpole) -> None:
    """With a core each, async's iteration is about the slower of rollout and learner; sync's their sum."""
    _, graph, cal = cartpole
    shape = fragments.ClusterShape(hosts=1, cores=4.0)
    constants = fragments.CostConstants()
    sync = fragments.predict(_fdg(graph, {"preset": "single_learner_coarse", "actors": 2}), cal, shape, constants)
    lagged = fragments.predict(_fdg(graph, {"preset": "async_single_learner", "actors": 2}), cal, shape, constants)
    rollout, learner = sync.fragment_busy["rollout"], sync.fragment_busy["learner"]
    assert lagged.iteration_s < sync.iteration_s
    assert lagged.iteration_s >= max(rollout, learner)
    assert sync.iteration_s >= rollout + learner
