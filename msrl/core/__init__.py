"""msrl's core: what an algorithm is written against and what every other layer builds on.

The components, the ``Algorithm`` base, tracing ``train_step`` into a
``DataflowGraph`` (the IR: ``Node``, ``ValueRef``, ``CarryRef``, ``LoopRegion``),
the closed vocabularies (``Op``, ``InterfaceOp``, ``Role``, ``ValueKind``),
spaces, errors, deferred values and config reading.  It imports nothing of
msrl above it: not ``msrl.app``, ``fragments``, ``policies``, ``cluster`` or
``algorithms``, at module level or inside a function (``tests/unit/test_layers.py``
checks every import).  ``msrl.rl`` and ``msrl.envs`` sit directly on it.

Users import the same names from ``msrl``; other msrl packages import them
from here, so that they depend on the core alone and not on the application
layer that ``msrl`` also fronts.
"""

from msrl.core._algorithm import Algorithm, RunInfo
from msrl.core._build import (
    Declared,
    EnvDefaults,
    building,
    component_class,
    constructing,
    share,
    split,
    split_fields,
)
from msrl.core._components import Actor, Batched, Buffer, Component, Environment, Global, Learner, NoValue
from msrl.core._config import (
    apply_overrides,
    build_dataclass,
    check_keys,
    check_plain_tree,
    check_unit_interval,
    import_object,
    parse_yaml,
    read_yaml,
)
from msrl.core._deferred import Deferred, deferred, deferring, has_deferred, pending_deferred, resolve_deferred
from msrl.core._errors import (
    BuildError,
    CheckpointError,
    ClusterError,
    ConfigError,
    ControlFlowError,
    DatasetError,
    DivergenceError,
    EnvError,
    HeadLostError,
    HiddenStateError,
    HostLostError,
    MsrlError,
    StorageError,
    TraceError,
    UndeclaredComponentError,
    UnsupportedOperationError,
    WorkerLostError,
)
from msrl.core._generators import load_generator_state
from msrl.core._graph import (
    CarryRef,
    DataflowGraph,
    GraphLintError,
    LoopRegion,
    Node,
    ValueRef,
    iter_leaves,
    map_leaves,
)
from msrl.core._spaces import AgentGroup, Box, Discrete, Space
from msrl.core._tracing import role_of, steps, trace
from msrl.core._vocab import InterfaceOp, Op, Role, ValueKind

__all__ = [
    "Actor",
    "AgentGroup",
    "Algorithm",
    "Batched",
    "Box",
    "Buffer",
    "BuildError",
    "CarryRef",
    "CheckpointError",
    "StorageError",
    "Component",
    "ConfigError",
    "ControlFlowError",
    "DatasetError",
    "DataflowGraph",
    "Declared",
    "Deferred",
    "Discrete",
    "DivergenceError",
    "EnvDefaults",
    "EnvError",
    "Environment",
    "Global",
    "GraphLintError",
    "InterfaceOp",
    "WorkerLostError",
    "ClusterError",
    "HeadLostError",
    "HostLostError",
    "HiddenStateError",
    "Learner",
    "LoopRegion",
    "MsrlError",
    "NoValue",
    "Node",
    "Op",
    "Role",
    "RunInfo",
    "Space",
    "TraceError",
    "UndeclaredComponentError",
    "UnsupportedOperationError",
    "ValueKind",
    "ValueRef",
    "apply_overrides",
    "build_dataclass",
    "check_keys",
    "building",
    "check_plain_tree",
    "check_unit_interval",
    "import_object",
    "component_class",
    "constructing",
    "deferred",
    "deferring",
    "has_deferred",
    "iter_leaves",
    "load_generator_state",
    "map_leaves",
    "parse_yaml",
    "pending_deferred",
    "read_yaml",
    "resolve_deferred",
    "role_of",
    "share",
    "split",
    "split_fields",
    "steps",
    "trace",
]
