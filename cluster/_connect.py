"""Start an embedded Ray instance or join an existing cluster, with safe defaults."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

# Ray reads this once, at import, to decide whether a node may take part in a cluster.  Where it
# may (the default on Linux), Ray advertises the node's network address and its GCS, raylet and
# worker servers listen on every interface, even for a single-machine instance.  Where it may
# not, the node's address is 127.0.0.1 and every server listens on loopback only.
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def connect(address: str | None = None, num_cpus: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """Initialise Ray once per process and return its cluster resources.

    With no ``address`` a local instance is started that listens on 127.0.0.1
    only: no dashboard, and its GCS, raylet and workers bound to loopback, so
    nothing on the network can reach it.  ``"auto"``, ``"host:port"`` or
    ``"ray://host:port"`` joins an existing cluster as Ray configures it.
    Ray's token authentication is left as Ray configures it.
    """
    import ray

    if not ray.is_initialized():
        if address is None:
            # "local": never attach to another instance by accident.
            with loopback_only():
                ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    dashboard_host="127.0.0.1",
                    configure_logging=True,
                    logging_level=logging.WARNING,
                    log_to_driver=True,
                    **kwargs,
                )
        else:
            ray.init(address=address, logging_level=logging.WARNING, **kwargs)
    return dict(ray.cluster_resources())


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
