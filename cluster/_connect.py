"""Start an embedded Ray instance or join an existing cluster, with safe defaults."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

from msrl.core import ClusterError

# Ray reads this once, at import, to decide whether a node may take part in a cluster.  Where it
# may (the default on Linux), Ray advertises the node's network address and its GCS, raylet and
# worker servers listen on every interface, even for a single-machine instance.  Where it may
# not, the node's address is 127.0.0.1 and every server listens on loopback only.
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
PROBE_TIMEOUT_S = 10.0
"""How long a cluster's address may take to accept a TCP connection before the join is refused:
``ray.init`` itself retries an address where nothing answers for minutes."""
START_TIMEOUT = "timed out during startup"
"""Ray's words when an embedded instance's raylet does not register within its 30 s."""
_RAY_LOG_LEVEL = {"level": logging.ERROR}
"""The level from which Ray's own log lines in this process are shown (``set_ray_log_level``)."""


def set_ray_log_level(level: int) -> int:
    """Show Ray's own log lines in this process from ``level`` on, from the next start or join, and
    return the level before: by default ``logging.ERROR``, so its informational warnings (on start,
    the notice that token authentication is on) stay in Ray's log files under its session
    directory; ``msrl ... --verbose`` sets ``logging.INFO``.  Token authentication itself is left
    as Ray configures it."""
    before, _RAY_LOG_LEVEL["level"] = _RAY_LOG_LEVEL["level"], level
    return before


def connect(address: str | None = None, num_cpus: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """Initialise Ray once per process and return its cluster resources.

    With no ``address`` a local instance is started that listens on 127.0.0.1
    only: no dashboard, and its GCS, raylet and workers bound to loopback, so
    nothing on the network can reach it.  ``"auto"``, ``"host:port"`` or
    ``"ray://host:port"`` joins an existing cluster as Ray configures it.
    Ray's token authentication is left as Ray configures it; its log lines below
    ``set_ray_log_level`` (ERROR by default) are not shown.

    A local start that times out (a loaded machine) is tried once more; an address where nothing
    accepts a connection within ``PROBE_TIMEOUT_S`` is refused at once.  Either failure is a
    one-line ``ClusterError``.
    """
    import ray

    if not ray.is_initialized():
        if address is None:
            _start_local(num_cpus, kwargs)
        else:
            probe(address)
            try:
                ray.init(address=address, logging_level=_RAY_LOG_LEVEL["level"], **kwargs)
            except ConnectionError as exc:  # something answers there, but not a Ray cluster's GCS
                raise ClusterError(f"cannot join the Ray cluster at {address!r}: {exc}") from None
    return dict(ray.cluster_resources())


def _start_local(num_cpus: int | None, kwargs: dict[str, Any]) -> None:
    import ray

    for attempt in (1, 2):
        try:
            # "local": never attach to another instance by accident.
            with loopback_only():
                ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    dashboard_host="127.0.0.1",
                    configure_logging=True,
                    logging_level=_RAY_LOG_LEVEL["level"],
                    log_to_driver=True,
                    **kwargs,
                )
            return
        except Exception as exc:  # Ray raises a bare Exception for this one
            if START_TIMEOUT not in str(exc):
                raise
            ray.shutdown()  # the half-started processes
            if attempt == 2:
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
                raise ClusterError(
                    f"the embedded Ray did not start, twice: {exc} (load {load:.1f} on "
                    f"{os.cpu_count()} cores); run again when the machine is less busy, or join a "
                    f"running cluster with --address"
                ) from None


def probe(address: str) -> None:
    """A ``ClusterError`` unless something accepts a TCP connection where ``address`` points (as
    Ray resolves it: ``"auto"`` and ``RAY_ADDRESS`` included) within ``PROBE_TIMEOUT_S``."""
    target = address
    if not target.startswith("ray://"):
        from ray._private.services import canonicalize_bootstrap_address

        try:
            target = canonicalize_bootstrap_address(address) or address
        except (ConnectionError, ValueError) as exc:
            raise ClusterError(f"cannot join the Ray cluster at {address!r}: {exc}") from None
    host, _, port = target.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"--address must be 'auto', 'host:port' or 'ray://host:port', got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        shown = address if target == address else f"{address!r} ({target})"
        raise ClusterError(
            f"no Ray cluster answers at {shown}: {exc.strerror or exc}; start one there "
            f"('ray start --head') or leave out --address to start an embedded one"
        ) from None


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """While a local instance starts: Ray in this process and the processes it launches (which
    inherit the environment) treat the machine as a single node on 127.0.0.1.  Afterwards this
    process is as it was, so a later ``connect(address)`` joins a real cluster normally; the
    started instance keeps its loopback address."""
    from ray._private import ray_constants

    saved_env, saved_flag = os.environ.get(CLUSTER_SWITCH), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[CLUSTER_SWITCH] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(CLUSTER_SWITCH, None)
        else:
            os.environ[CLUSTER_SWITCH] = saved_env


def node_resources(address: str) -> list[dict[str, float]]:
    """Join the cluster at ``address`` and return the total resources of each node it counts as
    alive (``CPU``, ``GPU``, custom ones): what a plan places the replicas on."""
    from cluster._hosts import alive_nodes

    connect(address)
    return [node.resources for node in alive_nodes()]
