"""The scaling model of docs/scaling.md: per preset, what one PPO iteration sends between hosts
(bytes and messages, counted from the config and the network's size) and what it costs on a link
of a given rate and delay, plus the fragments' compute.  Pure arithmetic, no Ray: its constants are
fitted on ``benchmarks.multihost_scaling``'s measured runs (``fit``) and it predicts any number of hosts
(``predict``).

Counts, for ``R`` replicas, each on a host of its own, ``E`` environments, ``S`` steps per
iteration, a network of ``P`` float32 parameters, ``k`` epochs of ``m`` minibatches:

* single_learner_coarse / async_single_learner: the learner sends its weights (4P bytes) to each
  rollout replica and receives each one's rollout, (E/R) x S steps of ``step_bytes``: 2R messages
  through the learner's interface per iteration, two one-way trips on the critical path;
* single_learner_fine: every step, each env replica sends its observations, rewards and dones up
  and receives its actions: 2R messages through the learner's interface per step, 2S one-way trips;
* multi_learner: k x m gradient all-reduces of 4P bytes, each a ring (gloo's): 2(R-1) steps in a
  row, each host sending 2(R-1)/R x 4P bytes;
* gpu_only: one fragment, nothing between fragments.

Every preset adds the driver's call of each replica and its reply (2 one-way trips).  A message
costs ``alpha`` of software time at the end that handles it (a Ray actor call, or a gloo step for
the all-reduce: ``alpha_ring``), each one-way trip the link's delay, each byte 1/rate at the
busiest interface, plus ``header`` bytes of framing a message."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """What one iteration moves: configs/ppo_cartpole.yaml's PPO on CartPole by default."""

    num_envs: int = 64
    num_steps: int = 32
    obs_dim: int = 4
    params: int = 9155  # TwinMLP(4, 2, hidden 64): policy and value nets in one flat float32 vector
    epochs: int = 4
    minibatches: int = 8
    obs_itemsize: int = 4  # float32 vectors; uint8 frames: 1

    @property
    def obs_bytes(self) -> int:
        return self.obs_itemsize * self.obs_dim

    @property
    def step_bytes(self) -> int:
        """One env step of a rollout: obs, action (int64), log-prob, value, reward (float32), done."""
        return self.obs_bytes + 8 + 4 + 4 + 4 + 1

    @property
    def weight_bytes(self) -> int:
        return 4 * self.params

    def scaled(self, num_envs: int) -> Workload:
        """The same workload with ``num_envs`` environments in all."""
        return dataclasses.replace(self, num_envs=num_envs)


WORKLOADS = {
    "ppo_cartpole": Workload(),
    "ppo_atari": Workload(
        num_envs=8, num_steps=128, obs_dim=4 * 84 * 84, params=1_687_719, epochs=4, minibatches=4, obs_itemsize=1
    ),
}
"""The workloads measured, by config name: configs/ppo_atari.yaml is PPO on Pong, 8 games x 128
steps of 4x84x84 uint8 frames, a Nature-CNN actor-critic of 1,687,719 float32 parameters."""


@dataclass(frozen=True)
class Link:
    rate_bits: float = float("inf")
    delay_s: float = 0.0
    """One way, host to host (a packet crosses two shaped links: twice a profile's delay)."""


@dataclass(frozen=True)
class Traffic:
    """Per iteration: bytes through the busiest host interface (both ways), messages handled in a row
    at its busiest end (Ray calls, and ring steps), one-way trips on the critical path."""

    bytes: float
    calls: int
    ring_steps: int
    trips: int

    duplex: bool = False
    """Sends and receives at once (a ring step), so the wire time is half the bytes' (full duplex)."""

    @property
    def messages(self) -> int:
        """Messages through the busiest interface, for their framing bytes (a ring step sends one
        message and receives one)."""
        return self.calls + 2 * self.ring_steps


def traffic(preset: str, replicas: int, w: Workload = Workload(), remote: int | None = None) -> Traffic:
    """``remote``: how many of the replicas sit on other hosts than the learner (all by default); those
    on the learner's host talk over a socket on the host, which costs a message but no wire bytes."""
    r, e, s = replicas, w.num_envs, w.num_steps
    far = r if remote is None else remote
    driver = 2  # the driver's call of the replica it waits on, and the reply
    if preset in ("single_learner_coarse", "async_single_learner"):
        payload = far * w.weight_bytes + far * (e // r) * s * w.step_bytes
        return Traffic(payload, 2 * r + driver, 0, 2 + driver)
    if preset == "single_learner_fine":
        payload = s * far * (e // r) * (w.obs_bytes + 4 + 1 + 8)  # up: obs, reward, done; down: int64 action
        return Traffic(payload, 2 * r * s + driver, 0, 2 * s + driver)
    if preset in ("multi_learner", "multi_learner_hd"):
        rounds = w.epochs * w.minibatches
        # a ring: 2(R-1) steps; halving-doubling (hypothetical here: msrl leaves the choice to gloo): 2 log2 R
        steps = rounds * 2 * ((r - 1) if preset == "multi_learner" else math.ceil(math.log2(r)) if r > 1 else 0)
        payload = rounds * 2 * (2 * (r - 1) / r) * w.weight_bytes if far else 0.0  # sent and received by a host
        return Traffic(payload, driver, steps, steps + driver, duplex=True)
    if preset == "gpu_only":
        return Traffic(0.0, driver, 0, driver)
    raise ValueError(f"unknown preset {preset!r}")


@dataclass(frozen=True)
class Constants:
    alpha: float  # seconds of software per Ray message at its busiest end
    alpha_ring: float  # seconds of software per ring step of the all-reduce
    header: float = 0.0  # bytes of framing per message (Ray's task spec and gRPC, TCP/IP headers)


def communication(t: Traffic, link: Link, c: Constants) -> float:
    """Seconds of an iteration spent communicating."""
    share = 0.5 if t.duplex else 1.0
    wire = share * (t.bytes + c.header * t.messages) * 8 / link.rate_bits if link.rate_bits != float("inf") else 0.0
    return t.calls * c.alpha + t.ring_steps * c.alpha_ring + t.trips * link.delay_s + wire


@dataclass(frozen=True)
class Compute:
    """Seconds of compute, from the fragments' phases: per env step of a replica's environments
    (``per_env_step``) and of its policy inference and buffer (``per_infer_step``), and the learner's
    ``per_update`` plus ``per_sample`` for every sample it learns on (all epochs)."""

    per_env_step: float
    per_infer_step: float
    per_sample: float
    per_update: float = 0.0


def compute(preset: str, replicas: int, envs_per_replica: int, c: Compute, w: Workload = Workload()) -> float:
    """Seconds of compute on an iteration's critical path with ``replicas`` replicas of
    ``envs_per_replica`` environments each (weak scaling: the batch grows with the replicas)."""
    steps = envs_per_replica * w.num_steps  # one replica's env steps
    total = replicas * steps
    if preset == "single_learner_fine":  # the environments on their replicas, inference for all on the learner
        return c.per_env_step * steps + c.per_infer_step * total + c.per_update + c.per_sample * total
    rollout = (c.per_env_step + c.per_infer_step) * steps
    if preset in ("multi_learner", "multi_learner_hd", "gpu_only"):  # each replica learns its own samples
        return rollout + c.per_update + c.per_sample * steps
    learn = c.per_update + c.per_sample * total
    if preset == "async_single_learner":  # the rollouts overlap the learner's update
        return max(rollout, learn)
    return rollout + learn


def predict(
    preset: str, hosts: int, link: Link, k: Constants, c: Compute, envs_per_host: int = 32, w: Workload = Workload()
) -> dict[str, float]:
    """Iteration time and env steps/s on ``hosts`` hosts, one replica per host (gpu_only: one host
    whatever the cluster, its single fragment cannot spread)."""
    replicas = 1 if preset == "gpu_only" else hosts
    scaled = w.scaled(replicas * envs_per_host)
    comm = communication(traffic(preset, replicas, scaled), link, k)
    comp = compute(preset, replicas, envs_per_host, c, w)
    seconds = comp + comm
    return {
        "compute_s": comp,
        "communication_s": comm,
        "iteration_s": seconds,
        "steps_per_s": replicas * envs_per_host * w.num_steps / seconds,
    }


# -- fitting on measured runs (rows of benchmarks/results/multihost/hosts*.json) -------------------------
RATES = {"none": float("inf"), "10gbit-0.1ms": 10e9, "1gbit-0.5ms": 1e9, "100mbit-2ms": 100e6}
DELAYS = {"none": 0.0, "10gbit-0.1ms": 0.1e-3, "1gbit-0.5ms": 0.5e-3, "100mbit-2ms": 2e-3}
"""Each profile's delay on every host's link, one way."""


def remote_replicas(row: dict) -> int:
    """Replicas placed on another host than the learner's (every replica for multi_learner)."""
    nodes = dict(re.findall(r"fragment (\w+\[\d+\]) on node ([0-9.]+)", row["placement"]))
    learner = nodes.get("learner[0]")
    if learner is None:
        return row["replicas"] if len(set(nodes.values())) > 1 else 0
    return sum(1 for name, node in nodes.items() if not name.startswith("learner") and node != learner)


DEFAULT_BUCKET = 64 * 1024
"""The testbed's tc tbf bucket unless ``--burst`` sets one: 1 ms of the rate, at least 64 KiB."""


def largest_message(preset: str, replicas: int, w: Workload) -> int:
    """The largest message of an iteration, bytes: the weights or one replica's rollout (coarse,
    async), one replica's observations of a step (fine), a ring step's share of the gradient."""
    per_replica = w.num_envs // replicas
    if preset in ("single_learner_coarse", "async_single_learner"):
        return max(w.weight_bytes, per_replica * w.num_steps * w.step_bytes)
    if preset == "single_learner_fine":
        return per_replica * (w.obs_bytes + 4 + 1)
    if preset in ("multi_learner", "multi_learner_hd"):
        return math.ceil(w.weight_bytes / replicas)
    return 0


def rate(row: dict) -> float:
    """The rate a run's messages paid: the profile's under a token bucket of two frames (``tbf_burst``),
    or where a message is larger than the default bucket (64 KiB: PPO on frames, whose weights are
    6.8 MB and a step's observations 113 kB) and drains it; none otherwise: every message of the
    CartPole runs fits the default bucket, which never ran dry (the busiest interface moved under
    30 Mbit/s sustained)."""
    w = WORKLOADS[row.get("config", "ppo_cartpole")]
    drains = largest_message(row["preset"], row["replicas"], w) > DEFAULT_BUCKET
    return RATES[row["profile"]] if row.get("tbf_burst") or drains else float("inf")


def delay(row: dict) -> float:
    """The one-way delay host to host that a run's messages paid: a packet crosses two shaped links,
    so twice the profile's, where the run applied it (``delay_applied``: tc netem, or the testbed's
    relay, testbed/_delay.py); none in the rate-only runs made before the relay."""
    return 2 * DELAYS[row["profile"]] if row.get("delay_applied") else 0.0


def row_traffic(row: dict) -> Traffic:
    """The model's traffic for a measured run, of the workload its config names."""
    workload = WORKLOADS[row.get("config", "ppo_cartpole")]
    return traffic(row["preset"], row["replicas"], workload, remote=remote_replicas(row))


def busiest_bytes(row: dict) -> float:
    """Measured: the busiest host interface's bytes per iteration, both ways."""
    return max(h["rx_bytes"] + h["tx_bytes"] for h in row["per_host"])


def fit(rows: list[dict]) -> Constants:
    """``alpha`` and ``alpha_ring`` by least squares (no intercept) on the measured communication
    time less the wire time of the bytes each run moved through its busiest interface and less its
    trips' delay."""
    sxx = sxy = syy = bx = by = 0.0
    for row in rows:
        t = row_traffic(row)
        wire = (0.5 if t.duplex else 1.0) * busiest_bytes(row) * 8 / rate(row)
        y = row["communication_s"] - wire - t.trips * delay(row)
        x1, x2 = float(t.calls), float(t.ring_steps)
        sxx, sxy, syy = sxx + x1 * x1, sxy + x1 * x2, syy + x2 * x2
        bx, by = bx + x1 * y, by + x2 * y
    det = sxx * syy - sxy * sxy
    header = fit_header(rows)
    if abs(det) < 1e-12:  # no all-reduce among the rows: alpha alone
        return Constants(bx / sxx, 0.0, header)
    return Constants((bx * syy - by * sxy) / det, (sxx * by - sxy * bx) / det, header)


def fit_header(rows: list[dict]) -> float:
    """Framing bytes per message, by least squares on what the busiest interface moved beyond the
    payload the model counts (runs whose busiest interface carries messages of the run)."""
    num = den = 0.0
    for row in rows:
        t = row_traffic(row)
        # more ranks than hosts: a host may hold two ranks apart in the ring, and carry two ring links
        doubled = row["preset"] == "multi_learner" and row["replicas"] > row["hosts"]
        if t.bytes > 0 and not doubled:
            num += t.messages * (busiest_bytes(row) - t.bytes)
            den += t.messages * t.messages
    return num / den if den else 0.0


def check(row: dict, k: Constants) -> dict[str, float]:
    """The model's iteration time for a measured run (its measured compute plus the predicted
    communication, with the delay the run applied) and its bytes, against the measurement."""
    t = row_traffic(row)
    comm = communication(t, Link(rate(row), delay(row)), k)
    predicted = row["compute_s"] + comm
    return {
        "comm_predicted_s": comm,
        "iteration_predicted_s": predicted,
        "time_error": predicted / row["iteration_s"] - 1,
        "bytes_predicted": t.bytes + k.header * t.messages,
        "bytes_measured": busiest_bytes(row),
    }
