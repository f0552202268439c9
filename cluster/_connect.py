"""Start an embedded Ray instance or join an existing cluster, with safe defaults."""

from __future__ import annotations

from typing import Any


def connect(address: str | None = None, num_cpus: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """Initialise Ray once per process and return its cluster resources.

    With no ``address`` a local instance is started with the dashboard off
    (nothing listens beyond 127.0.0.1); ``"auto"`` or ``"ray://host:port"``
    joins an existing cluster.  Ray's token authentication is left as Ray
    configures it.
    """
    import ray

    if not ray.is_initialized():
        if address is None:
            # "local": never attach to another instance by accident.
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, dashboard_host="127.0.0.1",
                     configure_logging=True, logging_level="WARNING", log_to_driver=True, **kwargs)
        else:
            ray.init(address=address, logging_level="WARNING", **kwargs)
    return dict(ray.cluster_resources())
