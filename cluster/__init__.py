"""Everything Ray: starting or joining a cluster, placement groups, fragment
worker actors and the transport between them.  Nothing else in msrl imports
Ray; the run loop reaches this package only through ``msrl._runtime``."""

from cluster._connect import connect
from cluster._runtime import RayRuntime

__all__ = ["RayRuntime", "connect"]
