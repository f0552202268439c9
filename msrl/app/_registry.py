"""Algorithms by name: the built-in table, or a user's class as ``package.module:Class``."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util

from msrl.core import Algorithm, ConfigError, import_object

BUILTIN = {
    "a2c": "algorithms.a2c:A2C",
    "a3c": "algorithms.a3c:A3C",
    "ac": "algorithms.pg:AC",
    "apex_dqn": "algorithms.dqn:ApeX",
    "awac": "algorithms.awac:AWAC",
    "cql": "algorithms.cql:CQL",
    "ddpg": "algorithms.ddpg:DDPG",
    "dqn": "algorithms.dqn:DQN",
    "gail": "algorithms.gail:GAIL",
    "impala": "algorithms.impala:IMPALA",
    "maddpg": "algorithms.maddpg:MADDPG",
    "iql": "algorithms.iql:IQL",
    "ippo": "algorithms.mappo:IPPO",
    "mappo": "algorithms.mappo:MAPPO",
    "pg": "algorithms.pg:PG",
    "ppo": "algorithms.ppo:PPO",
    "qmix": "algorithms.qmix:QMIX",
    "sac": "algorithms.sac:SAC",
    "td3": "algorithms.ddpg:TD3",
    "vdn": "algorithms.qmix:VDN",
}
"""Built-in algorithm name -> ``module:Class``, imported on first use."""


def algorithm_names() -> list[str]:
    return sorted(BUILTIN)


def get_algorithm(name: str) -> type[Algorithm]:
    """A built-in algorithm by name, or a user's as ``package.module:ClassName``."""
    spec = BUILTIN.get(name, name)
    if ":" not in spec:
        raise ConfigError(
            f"unknown algorithm {name!r}; valid choices: {', '.join(algorithm_names())} or 'module:Class'"
        )
    cls = import_object(spec, "algorithm")
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"algorithm {name!r} is not an msrl.Algorithm subclass")
    if not dataclasses.is_dataclass(getattr(cls, "Config", None)):
        raise ConfigError(f"algorithm {name!r} has no Config dataclass")
    return cls


def config_fields(name: str) -> list[str] | None:
    """The field names of a built-in algorithm's ``Config``, in order, read from its module's
    source (and the sources of its package's modules it imports a base from) without importing
    it: an algorithm imports torch (seconds), and a misspelt ``algo.`` key is answered before
    that.  None where the sources do not say them plainly (a user's ``module:Class``, a ``Config``
    or a base of it defined outside the package): ``get_algorithm`` and the dataclass itself then
    check the keys."""
    spec = BUILTIN.get(name)
    if spec is None:
        return None
    module_name, _, class_name = spec.partition(":")
    classes = _classes_of(module_name)
    if classes is None:
        return None
    config = _config_of(classes, class_name)
    return None if config is None else _fields(classes, config)


def _classes_of(module_name: str, depth: int = 2) -> dict[str, ast.ClassDef] | None:
    """The classes a module's source defines, and those it imports by name from other modules of
    its package (``from algorithms._offline import OfflineConfig``), ``depth`` imports deep; None
    where the source cannot be read."""
    try:
        found = importlib.util.find_spec(module_name)
        if found is None or found.origin is None:
            return None
        with open(found.origin, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (ImportError, OSError, SyntaxError, ValueError):
        return None
    classes: dict[str, ast.ClassDef] = {}
    package = module_name.split(".")[0]
    for node in tree.body:
        if depth and isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            imported = _classes_of(node.module, depth - 1) or {}
            classes.update({alias.name: imported[alias.name] for alias in node.names if alias.name in imported})
    classes.update({node.name: node for node in tree.body if isinstance(node, ast.ClassDef)})
    return classes


def _config_of(classes: dict[str, ast.ClassDef], name: str) -> str | None:
    """The class named by ``Config = X`` in class ``name`` or the nearest of its bases in the module."""
    node = classes.get(name)
    if node is None:
        return None
    for statement in node.body:
        if (
            isinstance(statement, ast.Assign)
            and [ast.unparse(target) for target in statement.targets] == ["Config"]
            and isinstance(statement.value, ast.Name)
        ):
            return statement.value.id
    for base in node.bases:
        if isinstance(base, ast.Name):
            found = _config_of(classes, base.id)
            if found is not None:
                return found
    return None


def _fields(classes: dict[str, ast.ClassDef], name: str) -> list[str] | None:
    """The fields of the ``@dataclass`` class ``name``, as ``dataclasses.fields`` orders them: its
    bases' first, then its own annotated names (a ``ClassVar`` is none)."""
    node = classes.get(name)
    if node is None or not any(ast.unparse(d).split("(")[0] == "dataclass" for d in node.decorator_list):
        return None
    names: dict[str, None] = {}
    for base in node.bases:
        inherited = _fields(classes, base.id) if isinstance(base, ast.Name) else None
        if inherited is None:
            return None
        names.update(dict.fromkeys(inherited))
    for statement in node.body:
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and "ClassVar" not in ast.unparse(statement.annotation)
        ):
            names[statement.target.id] = None
    return list(names)
