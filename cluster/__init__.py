"""Everything Ray: starting or joining a cluster, placement groups, fragment
worker actors, the transport between them and the gradient all-reduce.  No
package below this one imports Ray; the application reaches it only through
``RayRuntime``, which has the same interface as ``fragments.LocalRuntime``."""

from cluster._callreply import REPLY_SLOTS, CallRoutes, ReplySlots, call_routes
from cluster._collective import backend_for
from cluster._connect import CLUSTER_SWITCH, connect, loopback_only, node_resources, set_ray_log_level
from cluster._direct import SHARED_MIN_BYTES, SOCKET_ROOT, DirectListener, DirectSender
from cluster._hosts import answering_nodes
from cluster._placement import (
    PLACEMENT_TIMEOUT_S,
    bundles_of,
    check_feasible,
    create_placement_group,
    demand_of,
    describe_placement,
    resources_in_use,
    wait_until_released,
)
from cluster._reports import merge_replica_metrics, merge_reports
from cluster._runtime import RayRuntime
from cluster._schedule import SCHEDULES, AsyncSchedule, SyncSchedule
from cluster._startup import MAX_CPUS_PER_CORE, actor_resources, starts_embedded
from cluster._transport import Mailbox, MailboxClosed, RayTransport
from cluster._worker import ComputeThread

__all__ = [
    "CLUSTER_SWITCH",
    "MAX_CPUS_PER_CORE",
    "PLACEMENT_TIMEOUT_S",
    "REPLY_SLOTS",
    "SCHEDULES",
    "AsyncSchedule",
    "CallRoutes",
    "ComputeThread",
    "DirectListener",
    "DirectSender",
    "SHARED_MIN_BYTES",
    "SOCKET_ROOT",
    "Mailbox",
    "MailboxClosed",
    "RayRuntime",
    "RayTransport",
    "ReplySlots",
    "SyncSchedule",
    "actor_resources",
    "answering_nodes",
    "backend_for",
    "bundles_of",
    "call_routes",
    "check_feasible",
    "connect",
    "create_placement_group",
    "demand_of",
    "describe_placement",
    "loopback_only",
    "merge_replica_metrics",
    "merge_reports",
    "node_resources",
    "resources_in_use",
    "set_ray_log_level",
    "starts_embedded",
    "wait_until_released",
]
