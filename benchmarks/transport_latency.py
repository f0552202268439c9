"""What does one per-step round trip cost on each transport?  Ray Compiled Graphs against the paths
msrl uses.

``single_learner_fine`` moves an observation batch up and an action batch down every env step.
Between replicas on one node msrl sends them over its own Unix sockets (``cluster._direct``);
between nodes over Ray actor calls.  This script times one such round trip (observations 32x4
float32 one way, 32 int64 actions back) on each path, and over Ray Compiled Graphs
(``experimental_compile``: shared-memory channels on a node, Ray's transfer between nodes):

* one node, on an embedded Ray: msrl's socket ping-pong between two actors (its ``DirectSender``
  and ``Mailbox``), the same over actor calls, and driver -> actor -> driver as a compiled graph
  and as an actor call;
* across two testbed hosts (``--hosts``, needs root; see ``testbed/``): driver on host 0,
  the env actor on host 1, driver -> env -> driver and driver -> env -> policy (host 0) -> driver,
  each as a compiled graph and as actor calls;
* and there, ``single_learner_fine`` itself (PPO on CartPole, 32 envs, one env replica, the learner
  and the env on different hosts): the learner's communication time per env step (sending its
  actions, receiving the observations) with msrl's call and reply between nodes
  (``cluster._callreply``) and with two one-way calls instead (``call_reply=False``).

And ``--frames``: one PPO Pong rollout (8 games x 128 steps of 4x84x84 uint8 frames, 28.9 MB, with
its other fields) delivered to a same-node listener, every page of its frames touched once by the
receiver, through a
shared-memory file (what msrl does from ``cluster.SHARED_MIN_BYTES`` up) and inline through the
socket.

Rounds alternate between the paths, so a slow spell of the machine hits each alike.

    python -m benchmarks.transport_latency            # one node
    python -m benchmarks.transport_latency --hosts    # and across two testbed hosts
    python -m benchmarks.transport_latency --hosts --fine-only   # only the fine preset's two paths
    python -m benchmarks.transport_latency --frames --rounds 20      # a rollout of frames on one node
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from benchmarks.harness import REPO, median_p90, table_head, timed


def summary(times: list[float]) -> str:
    median, p90 = median_p90(times)
    return f"{median * 1e6:,.0f} µs | {p90 * 1e6:,.0f} µs"


# -- msrl's socket path against actor calls, between two actors ----------------------------------------
class _Peer:
    """One side of a ping-pong over msrl's transport classes."""

    def __init__(self, name: str) -> None:
        from cluster import DirectListener, Mailbox

        self.mailbox = Mailbox()
        self.listener = DirectListener(self.mailbox, name)
        self.sender = None
        self.other = None

    def path(self) -> str:
        return self.listener.path

    def pair(self, path: str, other) -> None:
        from cluster import DirectSender

        self.sender, self.other = DirectSender(path), other

    def deliver(self, node: str, src: int, seq: int, payload) -> None:
        self.mailbox.put(node, src, seq, payload)

    def echo(self, rounds: int, direct: bool) -> None:
        action = torch.zeros(32, dtype=torch.int64)
        for i in range(rounds):
            self.mailbox.take("obs", 0, i)
            self._send("act", i, action, direct)

    def ping(self, rounds: int, direct: bool) -> list[float]:
        obs = np.zeros((32, 4), dtype=np.float32)
        times = []
        for i in range(rounds):
            start = time.perf_counter()
            self._send("obs", i, obs, direct)
            self.mailbox.take("act", 0, i)
            times.append(time.perf_counter() - start)
        return times

    def _send(self, node: str, seq: int, payload, direct: bool) -> None:
        if direct:
            self.sender.deliver(node, 0, seq, payload)
        else:
            self.other.deliver.remote(node, 0, seq, payload)


def round_trip(rounds: int) -> dict[str, list[float]]:
    import ray

    peer_cls = ray.remote(num_cpus=0, max_concurrency=4)(_Peer)
    a, b = peer_cls.remote("a"), peer_cls.remote("b")
    ray.get([a.pair.remote(ray.get(b.path.remote()), b), b.pair.remote(ray.get(a.path.remote()), a)])
    out = {}
    for label, direct in (
        ("same-node socket (msrl per-step path)", True),
        ("Ray actor calls (cross-node path)", False),
    ):
        done = b.echo.remote(rounds, direct)
        times = ray.get(a.ping.remote(rounds, direct))
        ray.get(done)
        out[label] = times[rounds // 10 :]  # drop warm-up
    for handle in (a, b):
        ray.kill(handle)
    return out


def _actors():  # type: ignore[no-untyped-def]
    import ray

    @ray.remote(num_cpus=0)
    class Env:
        def __init__(self) -> None:
            self.obs = np.zeros((32, 4), np.float32)

        def step(self, action: np.ndarray) -> np.ndarray:
            return self.obs

    @ray.remote(num_cpus=0)
    class Policy:
        def act(self, obs: np.ndarray) -> np.ndarray:
            return np.zeros(32, np.int64)

    return Env, Policy


def compiled(dag_of: Callable[[object], object]) -> tuple[Callable[[], object], Callable[[], None]]:
    """A compiled graph of ``dag_of(input)`` and its execute-and-wait, with its teardown."""
    import ray
    from ray.dag import InputNode

    with InputNode() as inp:
        graph = dag_of(inp).experimental_compile()  # type: ignore[attr-defined]
    action = np.zeros(32, np.int64)
    return (lambda: ray.get(graph.execute(action))), graph.teardown


def one_node(rounds: int, repeats: int) -> dict[str, list[float]]:
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )
    env_cls, _ = _actors()
    env = env_cls.remote()
    action = np.zeros(32, np.int64)
    out: dict[str, list[float]] = {}
    for _ in range(repeats):
        for label, times in round_trip(rounds).items():
            out.setdefault(f"actor <-> actor, {label}", []).extend(times)
        run, teardown = compiled(lambda inp: env.step.bind(inp))  # type: ignore[attr-defined]
        out.setdefault("driver -> actor -> driver, compiled graph", []).extend(timed(run, rounds))
        teardown()
        call = lambda: ray.get(env.step.remote(action))  # noqa: E731
        out.setdefault("driver -> actor -> driver, actor call", []).extend(timed(call, rounds))
    ray.shutdown()
    return out


def across_hosts(address: str, rounds: int, repeats: int) -> dict[str, list[float]]:
    """Run on the testbed's head host: the env actor on the other host."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    here = ray.get_runtime_context().get_node_id()
    there = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here)
    env_cls, policy_cls = _actors()
    env = env_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(there, soft=False)).remote()
    policy = policy_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
    action = np.zeros(32, np.int64)
    out: dict[str, list[float]] = {}
    for _ in range(repeats):
        run, teardown = compiled(lambda inp: env.step.bind(inp))  # type: ignore[attr-defined]
        out.setdefault("driver (h0) -> env (h1) -> driver, compiled graph", []).extend(timed(run, rounds))
        teardown()
        call = lambda: ray.get(env.step.remote(action))  # noqa: E731
        out.setdefault("driver (h0) -> env (h1) -> driver, actor call", []).extend(timed(call, rounds))
        run, teardown = compiled(lambda inp: policy.act.bind(env.step.bind(inp)))  # type: ignore[attr-defined]
        out.setdefault("driver -> env (h1) -> policy (h0) -> driver, compiled graph", []).extend(timed(run, rounds))
        teardown()
        chain = lambda: ray.get(policy.act.remote(env.step.remote(action)))  # noqa: E731
        out.setdefault("driver -> env (h1) -> policy (h0) -> driver, actor calls", []).extend(timed(chain, rounds))
    ray.shutdown()
    return out


FINE_ENVS, FINE_STEPS = 32, 128
FINE_PATHS = {"call and reply": True, "one-way deliver calls": False}


def fine_steps(address: str, iterations: int, repeats: int) -> dict[str, list[float]]:
    """Per env step of ``single_learner_fine`` across two hosts, one row per path and measure: the
    learner's communication seconds (its sends and its waits for the observations, which include the
    env's stepping), the env fragment's stepping seconds and the iteration's wall seconds (learning
    included), each iteration divided by its steps.  Each repeat runs every path, in turn, on fresh workers."""
    import ray
    import yaml

    from cluster import RayRuntime
    from msrl.app import load_config, plan

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    raw = yaml.safe_load((REPO / "configs" / "ppo_cartpole.yaml").read_text())
    overrides = [
        f"algo.num_envs={FINE_ENVS}",
        f"algo.num_steps={FINE_STEPS}",
        "policy=single_learner_fine",
        "policy.envs=1",
        "policy.placement=STRICT_SPREAD",
    ]
    fine = plan(load_config(None, overrides, base=raw))
    out: dict[str, list[float]] = {}
    for _ in range(repeats):
        for label, call_reply in FINE_PATHS.items():
            runtime = RayRuntime(fine.recipe, fine.fdg, address=address, call_reply=call_reply)
            try:
                runtime.run_iteration()  # warm-up: the first iteration builds and compiles
                for _ in range(iterations):
                    start = time.perf_counter()
                    result = runtime.run_iteration()
                    wall = time.perf_counter() - start
                    comm = result.fragment_timings["learner"]["communication"]
                    out.setdefault(f"fine: {label}, learner communication", []).append(comm / FINE_STEPS)
                    stepping = result.fragment_timings["env"]["env"]  # inside the round trip: the env's own work
                    out.setdefault(f"fine: {label}, env fragment stepping", []).append(stepping / FINE_STEPS)
                    out.setdefault(f"fine: {label}, iteration wall", []).append(wall / FINE_STEPS)
            finally:
                runtime.close()
    ray.shutdown()
    return out


def print_fine(rows: dict[str, list[float]], repeats: int) -> None:
    """The fine rows, and the ratio of the two paths' learner communication within each repeat."""
    print(
        "\n"
        + table_head(
            [
                f"single_learner_fine across hosts, per env step ({FINE_ENVS} envs x {FINE_STEPS} steps an iteration)",
                "median",
                "p90",
            ]
        )
    )
    for label, times in rows.items():
        print(f"| {label.removeprefix('fine: ')} | {summary(times)} |")
    calls, delivers = (rows[f"fine: {label}, learner communication"] for label in FINE_PATHS)
    per = len(calls) // repeats
    ratios = sorted(
        float(np.median(delivers[r * per : (r + 1) * per]) / np.median(calls[r * per : (r + 1) * per]))
        for r in range(repeats)
    )
    print(f"\none-way / call-and-reply learner communication, per repeat: {', '.join(f'{x:.2f}x' for x in ratios)}")


def frame_delivery(rounds: int, repeats: int) -> dict[str, list[float]]:
    """Seconds to deliver a Pong-sized rollout and read its frames once, shared and inline."""
    from cluster import SHARED_MIN_BYTES, DirectListener, DirectSender, Mailbox
    from msrl.rl import RolloutBuffer

    steps, envs = 128, 8
    buffer = RolloutBuffer(steps, envs, (4, 84, 84), obs_dtype=torch.uint8)
    frames = torch.randint(0, 256, (steps, envs, 4, 84, 84), dtype=torch.uint8)
    for t in range(steps):
        zeros = torch.zeros(envs)
        buffer.insert(frames[t], torch.zeros(envs, dtype=torch.int64), zeros, zeros, zeros, zeros, zeros)
    batch = buffer.drain(torch.zeros(envs))
    mailbox = Mailbox()
    listener = DirectListener(mailbox, "learner")
    sender = DirectSender(listener.path)
    seq = 0

    def deliver() -> None:
        nonlocal seq
        seq += 1
        sender.deliver("learner", 0, seq, batch)
        obs = mailbox.take("learner", 0, seq).obs
        int(obs.reshape(-1)[::4096].sum())  # the learner touches every page of the frames once

    rows: dict[str, list[float]] = {"shared memory": [], "inline, through the socket": []}
    try:
        for _ in range(repeats):
            for label, threshold in (("shared memory", SHARED_MIN_BYTES), ("inline, through the socket", 1 << 62)):
                sender.shared_min_bytes = threshold
                rows[label] += timed(deliver, rounds)
    finally:
        sender.close()
        listener.close()
    return rows


def print_table(title: str, rows: dict[str, list[float]]) -> None:
    print("\n" + table_head([title, "median", "p90"]))
    for label, times in rows.items():
        print(f"| {label} | {summary(times)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="round trips per path and repeat")
    parser.add_argument("--repeats", type=int, default=2, help="alternations of the paths")
    parser.add_argument("--hosts", action="store_true", help="also across two testbed hosts (root)")
    parser.add_argument("--fine-iterations", type=int, default=4, help="fine iterations per path and repeat")
    parser.add_argument("--fine-only", action="store_true", help="across hosts, only the fine preset's rows")
    parser.add_argument("--frames", action="store_true", help="only a rollout of Atari frames on one node")
    parser.add_argument("--address", help=argparse.SUPPRESS)  # the run inside the testbed
    args = parser.parse_args()
    if args.frames:
        rows = frame_delivery(args.rounds, args.repeats)
        print_table("one node, a rollout of frames (28.9 MB), delivered and its pages touched", rows)
        return
    if args.address:
        rows = {} if args.fine_only else across_hosts(args.address, args.rounds, args.repeats)
        rows.update(fine_steps(args.address, args.fine_iterations, args.repeats))
        for label, times in rows.items():
            print(f"{label}\t{' '.join(f'{t:.9f}' for t in times)}")
        return
    if not args.fine_only:
        print_table("one node (round trip)", one_node(args.rounds, args.repeats))
    if args.hosts:
        from testbed import Testbed

        with Testbed(hosts=2, cpus=2) as bed:
            argv = [sys.executable, "-m", "benchmarks.transport_latency", "--address", bed.head_address]
            argv += ["--rounds", str(args.rounds)]
            argv += ["--repeats", str(args.repeats), "--fine-iterations", str(args.fine_iterations)]
            done = bed.run(0, [*argv, *(["--fine-only"] if args.fine_only else [])], timeout=1800, cwd=str(REPO))
        if done.returncode:
            raise SystemExit(f"transport_latency: error: the run across hosts failed: {done.stderr[-2000:]}")
        rows = {}
        for line in done.stdout.splitlines():
            if "\t" in line:
                label, values = line.split("\t")
                rows[label] = [float(v) for v in values.split()]
        fine = {label: times for label, times in rows.items() if label.startswith("fine: ")}
        if not args.fine_only:
            print_table("two testbed hosts (round trip)", {k: v for k, v in rows.items() if k not in fine})
        print_fine(fine, args.repeats)


if __name__ == "__main__":
    main()
