"""The on-premises recipe of examples/cluster/README.md, run as written on two testbed hosts (slow
tier): ``ray start --head --node-ip-address=<head ip>`` on one host, ``ray start --address=<head
ip>:6379`` on the other (each host with its own Ray temp dir), then ``msrl train ... --address
auto`` on the head under a preset spread over both.  The run reaches CartPole's threshold, its
placement report names both hosts, what listens on the hosts' network addresses is what the README
lists, and a client with another token is refused.  Run with ``pytest -m slow tests/multihost``."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from multihost_helpers import REPO, train_command

from testbed import Testbed, namespace_pids, namespaces

pytestmark = pytest.mark.slow

HOST_FLAGS = ["--num-cpus=2", "--disable-usage-stats"]
"""What the testbed adds to the recipe's ``ray start``: each host's share of this machine's cores, no usage report."""
PRESET = ["policy=single_learner_coarse", "policy.placement=SPREAD"]
NODE_PORTS = [
    "NodeManagerPort",
    "ObjectManagerPort",
    "RuntimeEnvAgentPort",
    "MetricsAgentPort",  # the dashboard agent's gRPC port
    "DashboardAgentListenPort",
    "MetricsExportPort",
]
"""The ports each node reports: the README's list, all but the dashboard agent's 52365 picked at random
unless ``ray start`` is told."""
HEAD_PORTS = {6379, 10001, 44217, 44227}
"""The head's fixed ports on the network: the GCS, Ray Client, and the autoscaler's and the
dashboard's metrics; the dashboard (8265) listens on loopback only."""
WORKER_PORTS = range(10002, 20000)
"""Ray's worker processes and the driver, one port each."""


def test_the_on_premises_recipe_trains_across_two_hosts(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = runs / "ppo_cartpole"
    log = tmp_path / "train.log"
    bed = Testbed(hosts=2, cpus=2)
    try:
        bed.up(start_ray=False)  # the network alone: Ray is the recipe's to start
        _ray_start(bed, 0, "--head", f"--node-ip-address={bed.address(0)}", f"--temp-dir={bed.head_temp_dir}")
        _ray_start(bed, 1, f"--address={bed.head_address}")
        bed.wait_for_nodes(2)
        node_ports = _node_ports(bed)
        with log.open("w") as out:
            command = train_command("auto", runs, "eval_episodes=20", *PRESET)
            driver = bed.popen(0, command, cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_for(run_dir / "placement.txt", driver, log)
            listening = {host: _network_listeners(bed, host) for host in range(2)}
            other_token = f"import ray; ray.init(address={bed.head_address!r}, logging_level='ERROR')"
            refused = bed.run(1, [sys.executable, "-c", other_token], env={"RAY_AUTH_TOKEN": secrets.token_hex(32)})
            driver.wait(timeout=500)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait(timeout=60)
    finally:
        bed.down()  # every process of its namespaces killed by pid, Ray's daemons included; the namespaces deleted
    text = log.read_text()
    assert driver.returncode == 0, text[-3000:]
    placed = set(re.findall(r"on node ([0-9.]+) ", (run_dir / "placement.txt").read_text()))
    assert placed == {bed.address(0), bed.address(1)}, text[-3000:]
    greedy = float(re.search(r"greedy evaluation return: ([-0-9.]+)", text).group(1))
    assert greedy >= 475, text[-2000:]
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["restarts"] == 0
    # Token authentication stays on: a client with another token is turned away.
    assert refused.returncode != 0 and "InvalidAuthToken" in refused.stderr, refused.stderr[-2000:]
    # What listens on the hosts' network addresses is what the README lists, and no more.
    for host, address in enumerate((bed.address(0), bed.address(1))):
        allowed = set(node_ports[address]) | set(WORKER_PORTS) | (HEAD_PORTS if host == 0 else set())
        assert listening[host] <= allowed, (host, sorted(listening[host] - allowed), node_ports)
        assert node_ports[address][0] in listening[host], (host, listening[host])  # its node manager
    assert 6379 in listening[0] and 8265 not in listening[0], listening
    # The daemons the recipe started went with the testbed: no namespace, process or Ray directory left.
    assert namespaces(bed.name) == []
    assert all(namespace_pids(f"{bed.name}-h{host}") == [] for host in range(2))
    assert not list(Path("/tmp").glob(f"{bed.name}-*"))


def _ray_start(bed: Testbed, host: int, *flags: str) -> None:
    """``ray start`` on ``host`` as the recipe runs it: Ray's processes go on after the command returns."""
    done = bed.run(host, ["ray", "start", *flags, *HOST_FLAGS], timeout=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def _node_ports(bed: Testbed) -> dict[str, list[int]]:
    """Each node's address and the ports it reports (``ray.nodes()``, asked on the head through ``auto``)."""
    probe = (
        "import json, ray\n"
        "ray.init(address='auto', logging_level='ERROR')\n"
        f"keys = {NODE_PORTS!r}\n"
        "print(json.dumps({n['NodeManagerAddress']: [n[k] for k in keys] for n in ray.nodes() if n['Alive']}))\n"
    )
    done = bed.run(0, [sys.executable, "-c", probe], timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _network_listeners(bed: Testbed, host: int) -> set[int]:
    """The TCP ports host ``host`` listens on other than loopback (``ss``, in the host's namespace)."""
    ports = set()
    for line in bed.run(host, ["ss", "-Hltn"]).stdout.splitlines():
        address, _, port = line.split()[3].rpartition(":")
        if address.strip("[]").removeprefix("::ffff:") not in ("127.0.0.1", "::1"):
            ports.add(int(port))
    return ports


def _wait_for(path: Path, proc: subprocess.Popen, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {path} within {timeout_s:.0f} s: {log.read_text()[-3000:]}"
        time.sleep(0.2)
