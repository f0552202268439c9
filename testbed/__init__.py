"""A cluster of hosts on one Linux machine, for msrl's multi-host tests and for trying msrl across
hosts without a cloud: each host is a network namespace with its own address and its own Ray node,
and the hosts talk real TCP over a bridge that lives in a namespace of its own.  Needs root and
iproute2 (``ip``, ``tc``) and util-linux's ``unshare``.

    python -m testbed up --hosts 3             # prints the name, the hosts and the head's address
    python -m testbed exec NAME 0 -- msrl train configs/ppo_cartpole.yaml \\
        --address 198.51.100.10:6379 --set policy=single_learner_coarse --set policy.placement=SPREAD
    python -m testbed shape NAME 1 --rate 100mbit --delay 2ms   # --off: unshaped again
    python -m testbed down NAME                # or: down --all

Layout, for a testbed named ``NAME``:

* namespace ``NAME-br`` holds the bridge ``br0`` and one veth end ``vI`` per host; nothing else is
  on the bridge: no uplink, no default route anywhere, nothing added to the root namespace;
* host ``I`` is namespace ``NAME-hI`` with ``eth0`` at 198.51.100.(10 + I)/24 (TEST-NET-2, never
  routed) and loopback; host 0 is the head (Ray's GCS on port 6379) and runs the driver;
* each host's first process (``ip netns exec`` + ``unshare``) makes the host's own PID, UTS and
  mount namespaces, which every command on the host joins (``nsenter``): a host's processes see only
  each other (Ray finds its local raylet by listing
  processes), its own hostname, and a private ``/dev/shm`` (Ray's object store).  Worker hosts also
  get a private ``/tmp``, so they share no temporary files with the driver's host (the Python
  environment and the repository stay visible where they live under ``/tmp``, and so do the
  existing directories given as ``shared``, as a cluster's shared filesystem would hold them);
* Ray's token authentication is on: every process of the testbed gets the testbed's own token in
  ``RAY_AUTH_TOKEN`` with ``RAY_AUTH_MODE=token``.

A host is lost by ``kill_host`` (every process of its namespace SIGKILLed), cut off by
``set_link(i, False)`` and healed by ``set_link(i, True)``; ``shape`` gives its link a rate and a
delay (``tc netem``), or a rate alone (``tc tbf``, which needs no netem), and ``unshape`` takes them
off.  A kernel without ``sch_netem`` gets the delay from a relay in the bridge's namespace that
holds each frame (``testbed/_delay.py``), and the rate from tc tbf.  ``down`` kills by pid
(``ip netns pids``) and deletes the namespaces by the names it made, and runs from
``with Testbed(...)`` even when the body failed.
"""

from testbed._bed import Testbed
from testbed._cli import main
from testbed._delay import PROBE_CLIENT, PROBE_SERVER, Relay
from testbed._netns import (
    PREFIX,
    NetemMissing,
    TestbedError,
    destroy,
    namespace_pids,
    namespaces,
    netem_missing,
    unavailable,
)

__all__ = [
    "PREFIX",
    "PROBE_CLIENT",
    "PROBE_SERVER",
    "NetemMissing",
    "Relay",
    "Testbed",
    "TestbedError",
    "destroy",
    "main",
    "namespace_pids",
    "namespaces",
    "netem_missing",
    "unavailable",
]
