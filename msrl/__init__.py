"""msrl: write an RL algorithm once as a training loop over components; run it
on one process or a Ray cluster by switching the distribution policy in config."""

from msrl._algorithm import Algorithm, RunInfo
from msrl._components import Actor, Batched, Buffer, Component, Environment, Global, Learner, NoValue
from msrl._deferred import Deferred, deferred
from msrl._errors import CheckpointError, ConfigError, EnvError, MsrlError, TraceError
from msrl._graph import DataflowGraph
from msrl._spaces import Box, Discrete, Space
from msrl._tracing import steps, trace

__version__ = "0.1.0"

__all__ = [
    "Actor", "Algorithm", "Batched", "Box", "Buffer", "CheckpointError", "Component", "ConfigError",
    "DataflowGraph", "Deferred", "Discrete", "EnvError", "Environment", "Global", "Learner", "MsrlError", "NoValue",
    "RunInfo", "Space", "TraceError", "deferred", "steps", "trace",
]
