"""msrl: write an RL algorithm once as a training loop over components; run it
on one process or a Ray cluster by switching the distribution policy in config."""

from msrl._components import Actor, Batched, Buffer, Component, Environment, Global, Learner, NoValue
from msrl._errors import CheckpointError, ConfigError, EnvError, MsrlError, TraceError
from msrl._spaces import Box, Discrete, Space

__version__ = "0.1.0"
