"""Distribution policies: plain data saying how an algorithm's components are
grouped into fragments, replicated, executed and placed.  Presets cover the
common architectures; a custom policy is written in YAML with no Python.

Example::

    >>> from policies import load_policy
    >>> load_policy("local").fragments[0].executor
    'cpu'
"""

from policies._auto import ASYNC_PRESETS, AUTO, AutoParams, auto_params, candidates, label
from policies._presets import PRESETS, load_policy, preset_names
from policies._spec import MODES, PLACEMENTS, DistributionPolicy, FragmentSpec

__all__ = [
    "ASYNC_PRESETS",
    "AUTO",
    "MODES",
    "PLACEMENTS",
    "PRESETS",
    "AutoParams",
    "DistributionPolicy",
    "FragmentSpec",
    "auto_params",
    "candidates",
    "label",
    "load_policy",
    "preset_names",
]
