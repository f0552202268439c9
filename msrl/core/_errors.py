"""The exceptions msrl raises for bad input.

Every one of them carries a one-line message naming the offending value and
the valid choices; the CLI prints it and exits with status 2.
"""

from __future__ import annotations


class MsrlError(Exception):
    """Base of every error msrl reports to the user as one line (exit code 2)."""


class ConfigError(MsrlError):
    """A config file, a ``--set`` override or a distribution policy is wrong."""


class CheckpointError(MsrlError):
    """A checkpoint is missing, corrupt or belongs to another run."""


class DatasetError(MsrlError):
    """A dataset is missing, truncated or altered, or does not fit the run (other spaces than its
    environment's, non-finite values)."""


class StorageError(MsrlError):
    """The run directory cannot take a write (a full disk, a read-only or vanished directory): the
    run stops with the path and the bytes it needed, its last checkpoint as it was."""


class EnvError(MsrlError):
    """An environment produced something training cannot use (NaN, wrong shape)."""


class DivergenceError(MsrlError):
    """Training produced non-finite values (a learner's weights became NaN or inf): the run stops
    at the iteration it happened, its last checkpoint and metrics kept."""


class WorkerLostError(MsrlError):
    """A fragment worker died (its process or node was lost) or stopped answering liveness
    checks.  A run recovers from its last checkpoint up to ``max_restarts`` times; after
    that, or where a run cannot recover, this error stops it with the worker named."""


class HostLostError(MsrlError):
    """A node (host) of the cluster the run needs does not answer, and what is left of the cluster
    cannot hold the run's policy: the run stops with the host named, its last checkpoint kept."""


class HeadLostError(HostLostError):
    """The Ray cluster's head (its GCS) stopped answering: no Ray cluster goes on without its head,
    so the run stops with one line, its last checkpoint kept, to be resumed on a new cluster.  Ray
    calls would hang from here on, so the run's workers are left to the cluster's end."""


class ClusterError(MsrlError):
    """The Ray cluster a run needs could not be started or joined: the embedded instance did not
    come up (an overloaded machine), or no cluster answers at the ``--address`` given."""


class BuildError(MsrlError):
    """An algorithm's ``__init__`` uses a component that msrl does not construct in this
    process (it belongs to another fragment), or a fragment's build does not match the plan."""


class TraceError(MsrlError):
    """``train_step`` does something the tracer cannot turn into a dataflow graph.

    ``site`` is the user's ``file:line`` that caused it.
    """

    def __init__(self, message: str, site: str | None = None) -> None:
        self.site = site
        super().__init__(f"{site}: {message}" if site else message)


class ControlFlowError(TraceError):
    """Python control flow (``if``, ``while``, ``bool()``) on a traced value."""


class UndeclaredComponentError(TraceError):
    """A component method was called on a component the algorithm never declared."""


class UnsupportedOperationError(TraceError):
    """Computation on traced values outside a component, or an unsupported argument."""


class HiddenStateError(TraceError):
    """``train_step`` keeps state outside its components: it advances a counter, changes
    a list, draws a random number or calls a method of a non-component attribute.

    Python in ``train_step`` runs once, when msrl traces it; only component calls run
    every iteration.  Such state would silently keep the value it had while tracing.
    """
