"""The run's config: ``RunConfig`` (what a run is, besides the algorithm's own
hyper-parameters), read from YAML plus ``--set`` overrides and checked before
anything is started or written.

The ``algo`` section is checked against the chosen algorithm's ``Config``
dataclass and ``policy`` against ``policies``.  Every mistake is a
``ConfigError`` naming the key and the valid choices.  What can be checked
without importing the algorithm (torch: seconds) is checked first: the run's
own keys and values, the policy, the names of the ``algo`` keys.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from msrl.app._registry import config_fields, get_algorithm
from msrl.core import ConfigError, apply_overrides, build_dataclass, check_keys, read_yaml
from policies import DistributionPolicy, auto_params, load_policy

MAX_NAME = 100
"""Longest run name: run directories get suffixes (``_2``...) and files inside, all within the
file system's 255-byte name limit."""
MAX_ENV_STEPS = 10**15
"""Most env steps a run may ask for: a week at a billion steps a second.  Beyond it a typo (an extra
zero or three) would start a run that never ends."""
MAX_EVAL_EPISODES = 100_000
"""Most final evaluation episodes: they run as that many environments at once."""
MAX_SEED = 2**32 - 1
"""Seeds are 32-bit unsigned integers, as numpy and gymnasium take them."""


CHECKPOINT_ERROR_CHOICES = ("stop", "continue")


@dataclass
class RunConfig:
    """Everything about a run that is not the algorithm's own hyper-parameters."""

    name: str = "run"
    """Run name: results go to ``<runs_dir>/<name>`` (``_2``, ``_3``... if taken).  An override of
    ``algo.env_id`` that leaves the name as it is adds the environment to it
    (``ppo_cartpole_Acrobot-v1``): see ``apply_run_overrides``."""
    algorithm: str = "ppo"
    """A built-in algorithm name or ``package.module:Class``."""
    seed: int = 1
    """Seeds networks, environments and sampling; the same seed gives the same run."""
    total_env_steps: int = 100_000
    """Training stops after the first iteration that reaches this many environment steps."""
    policy: Any = "local"
    """Distribution policy: a preset name, ``{preset: name, ...params}``, a custom policy, or ``auto``
    (``{preset: auto, allow_async: true}``): the one ``msrl plan`` ranks first for this machine or
    the ``--address`` cluster, chosen when the run starts."""
    checkpoint_every: int = 10
    """Write a checkpoint every this many iterations (and always at the end); 0 = only at the end."""
    eval_episodes: int = 20
    """Greedy evaluation episodes run at the end of training; 0 skips it."""
    runs_dir: str = "runs"
    """Where run directories are created."""
    progress: bool = True
    """Show a progress bar on stderr."""
    max_restarts: int = 3
    """Ray runs: how many times a lost or stuck fragment worker is recovered from (the run goes
    back to its last checkpoint, or its start) before the run stops with an error; 0 = stop at once."""
    liveness_timeout_s: float = 30.0
    """Ray runs: a worker that answers no liveness check for this long while the run waits on it
    counts as stuck (killed and recovered from, like a lost one).  The cluster's head gets at most
    45 s of it: Ray ends a driver that lost its head for 60 s."""
    on_checkpoint_error: str = "stop"
    """A checkpoint the run directory cannot take (a full disk, a read-only directory): ``stop`` the
    run with one line naming the path and the bytes it needed, or ``continue`` without it, saying
    so each time. Either way the last checkpoint written stays as it was, the one to resume from."""
    algo: dict = field(default_factory=dict)
    """The algorithm's hyper-parameters, checked against its Config dataclass."""


@dataclass
class LoadedConfig:
    """A checked config: the run's settings, the algorithm's ``Config`` instance, the
    distribution policy that ``run.policy`` names, and the mapping they came from (written to
    the run directory and into checkpoints)."""

    run: RunConfig
    algo: Any
    raw: dict[str, Any]
    policy: DistributionPolicy


def load_config(path: str | None, overrides: Sequence[str] = (), base: dict[str, Any] | None = None) -> LoadedConfig:
    """Read, override and validate a config.  ``base`` replaces the file (resume)."""
    if base is None and path is None:
        raise ConfigError("a config needs a YAML file or a mapping")
    raw = base if base is not None else read_yaml(str(path))
    return validate(apply_run_overrides(raw, overrides))


def apply_run_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``raw`` with ``--set`` overrides applied (``raw`` itself is left as it is).  Where they change
    ``algo.env_id`` but not ``name``, the run is named after the environment too, in a form a file
    name can take (``ppo_cartpole_Acrobot-v1``, ``ppo_cartpole_ALE_Pong-v5``): a run on another
    environment does not land in ``ppo_cartpole_3`` among the config's own runs."""
    changed = apply_overrides(raw, list(overrides))
    env_id = changed.get("algo", {}).get("env_id") if isinstance(changed.get("algo"), dict) else None
    before = raw.get("algo", {}).get("env_id") if isinstance(raw.get("algo"), dict) else None
    name = changed.get("name", RunConfig.name)
    renamed = changed.get("name") != raw.get("name")
    if isinstance(env_id, str) and env_id != before and not renamed and isinstance(name, str):
        changed["name"] = f"{name}_{re.sub(r'[^A-Za-z0-9._-]', '_', env_id)}"[:MAX_NAME]
    return changed


def validate(raw: dict[str, Any]) -> LoadedConfig:
    run, policy = validate_run(raw)
    algorithm = get_algorithm(run.algorithm)
    algo = build_dataclass(algorithm.Config, run.algo, "algo.")
    check = getattr(algo, "validate", None)
    if callable(check):
        check()
    return LoadedConfig(run=run, algo=algo, raw=raw, policy=policy)


def validate_run(raw: dict[str, Any]) -> tuple[RunConfig, DistributionPolicy]:
    """The run's settings, checked, and its distribution policy, parsed; with the names of its
    ``algo`` keys checked too: everything ``validate`` checks before it imports the algorithm (and
    with it torch: seconds)."""
    run = build_dataclass(RunConfig, raw, "")
    if (
        not run.name
        or "/" in run.name
        or run.name.startswith(".")
        or len(run.name) > MAX_NAME
        or not run.name.isprintable()
    ):
        raise ConfigError(
            f"name must be a plain directory name of at most {MAX_NAME} printable characters, "
            f"without '/' or a leading '.', got {run.name[:60]!r}{'...' if len(run.name) > 60 else ''}"
        )
    if os.path.exists(run.runs_dir) and not os.path.isdir(run.runs_dir):
        raise ConfigError(f"runs_dir {run.runs_dir!r} exists and is not a directory")
    if not 0 <= run.seed <= MAX_SEED:  # numpy refuses negative seeds; copies add 1,000,003 per copy
        raise ConfigError(f"seed must be in [0, {MAX_SEED}], got {run.seed}")
    if not 1 <= run.total_env_steps <= MAX_ENV_STEPS:
        raise ConfigError(f"total_env_steps must be in [1, {MAX_ENV_STEPS:.0e}], got {run.total_env_steps}")
    if run.eval_episodes > MAX_EVAL_EPISODES:  # each is an environment built at once
        raise ConfigError(f"eval_episodes must be at most {MAX_EVAL_EPISODES:,}, got {run.eval_episodes}")
    for key in ("checkpoint_every", "eval_episodes"):
        if getattr(run, key) < 0:
            raise ConfigError(f"{key} must be >= 0, got {getattr(run, key)}")
    if not 0 <= run.max_restarts <= 1000:
        raise ConfigError(f"max_restarts must be in [0, 1000], got {run.max_restarts}")
    if run.on_checkpoint_error not in CHECKPOINT_ERROR_CHOICES:
        raise ConfigError(
            f"on_checkpoint_error must be one of {', '.join(CHECKPOINT_ERROR_CHOICES)}, got {run.on_checkpoint_error!r}"
        )
    if not 1.0 <= run.liveness_timeout_s <= 86_400.0:
        raise ConfigError(f"liveness_timeout_s must be in [1, 86400] seconds, got {run.liveness_timeout_s:g}")
    # ``auto`` is chosen when the run starts (msrl.app._auto.resolve_auto): until then it reads as
    # ``local``, the policy every candidate is calibrated under.
    policy = load_policy("local" if auto_params(run.policy) is not None else run.policy)
    fields = config_fields(run.algorithm)
    if fields is not None and isinstance(run.algo, dict):
        check_keys(run.algo, fields, "algo.")
    return run, policy
