"""Preset distribution policies and the parsing of the config's ``policy`` entry.

``policy`` in a config is either a preset name (``local``), a mapping with a
``preset`` key plus that preset's parameters, or a custom policy in the
generic form (``fragments``, ``placement``, ``mode``) with no Python at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msrl.core import ConfigError, build_dataclass
from policies._spec import DistributionPolicy, FragmentSpec, replica_count


@dataclass
class LocalParams:
    """``local``: one fragment, one replica, in the driver process, no Ray."""

    executor: str = ""
    """Empty means ``torch`` on a cuda device and ``cpu`` otherwise."""
    cpus: int = 1
    device: str = ""
    """Torch device; empty means ``cuda`` for the cuda executor and ``cpu`` otherwise."""


def _local(params: LocalParams) -> DistributionPolicy:
    device = _device(params.device, params.executor, 0.0)
    fragment = FragmentSpec(
        name="local",
        components=["*"],
        executor=_executor(params.executor, device),
        resources={"CPU": float(params.cpus)},
        device=device,
    )
    return DistributionPolicy("local", [fragment], in_process=True)


def _device(device: str, executor: str, gpus: float) -> str:
    """An empty device means: ``cuda`` when the fragment asks for a GPU or runs CUDA kernels, else ``cpu``."""
    return device or ("cuda" if gpus > 0 or executor == "cuda" else "cpu")


def _executor(executor: str, device: str) -> str:
    """An empty executor means: ``torch`` on a cuda device (the cpu executor runs on the CPU only),
    else ``cpu``.  So asking for a GPU (``learner_gpus: 1``) is enough to get a learner that uses it."""
    return executor or ("torch" if device.startswith("cuda") else "cpu")


def _counted(value: int | str, what: str) -> dict[str, Any]:
    """A preset fragment's ``replicas`` and ``elastic`` from its parameter (``N`` or ``LO..HI``)."""
    replicas, elastic = replica_count(value, what)
    return {"replicas": replicas, "elastic": elastic}


def _resources(cpus: float, gpus: float) -> dict[str, float]:
    return {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}


@dataclass
class CoarseParams:
    """``single_learner_coarse`` (Acme, RLlib): ``actors`` x {env, actor, buffer}
    collect whole rollouts on CPU; one learner gathers them and broadcasts weights.
    The run's ``num_envs`` is split evenly across the actor replicas; ``actors`` may be a
    range (``2..8``): the run uses what the cluster offers within it."""

    actors: int | str = 2
    actor_executor: str = "cpu"
    actor_cpus: float = 1.0
    learner_executor: str = ""
    """Empty means ``torch`` when the learner is on a GPU (``learner_gpus`` or a cuda
    ``learner_device``) and ``cpu`` otherwise."""
    learner_cpus: float = 1.0
    learner_gpus: float = 0.0
    learner_device: str = ""
    """Empty means ``cuda`` with ``learner_gpus`` or the cuda executor, else ``cpu``."""
    placement: str = "PACK"


def _learner_fragment(components: list[str], params: Any) -> FragmentSpec:
    """The single-replica learner fragment of the single-learner presets, from their ``learner_*`` parameters."""
    device = _device(params.learner_device, params.learner_executor, params.learner_gpus)
    return FragmentSpec(
        "learner",
        components,
        executor=_executor(params.learner_executor, device),
        resources=_resources(params.learner_cpus, params.learner_gpus),
        device=device,
    )


def _coarse(params: CoarseParams, name: str = "single_learner_coarse", mode: str = "sync") -> DistributionPolicy:
    return DistributionPolicy(
        name,
        [
            FragmentSpec(
                "rollout",
                ["env", "actor", "buffer"],
                **_counted(params.actors, "policy.actors"),
                executor=params.actor_executor,
                resources=_resources(params.actor_cpus, 0),
            ),
            _learner_fragment(["learner"], params),
        ],
        placement=params.placement,
        mode=mode,
    )


@dataclass
class AsyncParams(CoarseParams):
    """``async_single_learner`` (IMPALA): like ``single_learner_coarse``, but the
    actors collect the next rollout while the learner learns on the last one,
    acting with weights up to one update old (the lag is in the metrics)."""


def _async(params: AsyncParams) -> DistributionPolicy:
    return _coarse(params, name="async_single_learner", mode="async")


@dataclass
class FineParams:
    """``single_learner_fine`` (SEED RL): ``envs`` x {env} on CPU; one fragment
    holds actor, buffer and learner.  Observations go up and actions come down
    every step.  The run's ``num_envs`` is split evenly across the env replicas; ``envs``
    may be a range (``2..8``)."""

    envs: int | str = 2
    env_executor: str = "cpu"
    env_cpus: float = 1.0
    learner_executor: str = ""
    """Empty means ``torch`` when the learner is on a GPU, ``cpu`` otherwise (as ``single_learner_coarse``)."""
    learner_cpus: float = 1.0
    learner_gpus: float = 0.0
    learner_device: str = ""
    placement: str = "PACK"


def _fine(params: FineParams) -> DistributionPolicy:
    return DistributionPolicy(
        "single_learner_fine",
        [
            FragmentSpec(
                "env",
                ["env"],
                **_counted(params.envs, "policy.envs"),
                executor=params.env_executor,
                resources=_resources(params.env_cpus, 0),
            ),
            _learner_fragment(["actor", "buffer", "learner"], params),
        ],
        placement=params.placement,
    )


@dataclass
class MultiLearnerParams:
    """``multi_learner`` (DD-PPO): ``learners`` x {env, actor, buffer, learner};
    each replica learns on its own rollouts and gradients are all-reduced, so the
    replicas keep identical weights.  ``num_envs`` is split evenly across them; ``learners``
    may be a range (``2..8``)."""

    learners: int | str = 2
    executor: str = ""
    """Empty means ``torch`` when the replicas are on GPUs (``gpus`` or a cuda ``device``), ``cpu`` otherwise."""
    cpus: float = 1.0
    gpus: float = 0.0
    device: str = ""
    placement: str = "PACK"


def _multi_learner(params: MultiLearnerParams) -> DistributionPolicy:
    device = _device(params.device, params.executor, params.gpus)
    return DistributionPolicy(
        "multi_learner",
        [
            FragmentSpec(
                "worker",
                ["*"],
                **_counted(params.learners, "policy.learners"),
                executor=_executor(params.executor, device),
                resources=_resources(params.cpus, params.gpus),
                device=device,
            ),
        ],
        placement=params.placement,
    )


@dataclass
class GpuOnlyParams:
    """``gpu_only`` (WarpDrive, Anakin): everything in one fragment on one device
    (a Ray actor holding the GPU), env as torch ops or CUDA kernels, so nothing
    goes back to the host inside the rollout.  ``device=cpu`` runs the same
    layout without a GPU."""

    executor: str = "torch"
    device: str = "cuda"
    cpus: float = 1.0


def _gpu_only(params: GpuOnlyParams) -> DistributionPolicy:
    gpus = 1.0 if params.device.startswith("cuda") else 0.0
    return DistributionPolicy(
        "gpu_only",
        [
            FragmentSpec(
                "device", ["*"], executor=params.executor, resources=_resources(params.cpus, gpus), device=params.device
            ),
        ],
    )


# name -> (parameter dataclass, builder)
PRESETS: dict[str, tuple[type, Callable[[Any], DistributionPolicy]]] = {
    "local": (LocalParams, _local),
    "single_learner_coarse": (CoarseParams, _coarse),
    "single_learner_fine": (FineParams, _fine),
    "multi_learner": (MultiLearnerParams, _multi_learner),
    "gpu_only": (GpuOnlyParams, _gpu_only),
    "async_single_learner": (AsyncParams, _async),
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def _build_params(preset: str, params_type: type, values: dict[str, Any]) -> Any:
    """The preset's parameters from the config's ``policy`` mapping, built and type-checked as
    every other config section is (``msrl.core.build_dataclass``); an unknown key names the preset."""
    names = [f.name for f in dataclasses.fields(params_type)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"unknown parameter {unknown[0]!r} for policy {preset!r}; valid choices: {', '.join(names)}")
    return build_dataclass(params_type, values, "policy.")


def load_policy(spec: Any) -> DistributionPolicy:
    """Turn the config's ``policy`` entry into a ``DistributionPolicy``."""
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, dict):
        raise ConfigError(
            f"policy must be a preset name or a mapping, got {spec!r}; presets: {', '.join(preset_names())}"
        )
    if "preset" in spec:
        values = dict(spec)
        name = values.pop("preset")
        if not isinstance(name, str) or name not in PRESETS:
            raise ConfigError(
                f"unknown policy {name!r}; valid choices: {', '.join(preset_names())} "
                "or a custom policy with 'fragments'"
            )
        params_type, build = PRESETS[name]
        return build(_build_params(name, params_type, values))
    if "fragments" in spec:
        return _custom(spec)
    raise ConfigError(f"policy mapping needs 'preset' or 'fragments'; presets: {', '.join(preset_names())}")


def _custom(spec: dict[str, Any]) -> DistributionPolicy:
    allowed = {"name", "fragments", "placement", "mode"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(f"unknown policy key {unknown[0]!r}; valid choices: {', '.join(sorted(allowed))}")
    if not isinstance(spec["fragments"], list):
        raise ConfigError("policy.fragments must be a list of fragments")
    fragment_keys = {f.name for f in dataclasses.fields(FragmentSpec)} - {"elastic"}  # a range is written in replicas
    fragments = []
    for index, raw in enumerate(spec["fragments"]):
        if not isinstance(raw, dict):
            raise ConfigError(f"policy.fragments[{index}] must be a mapping, got {raw!r}")
        bad = sorted(set(raw) - fragment_keys)
        if bad:
            raise ConfigError(
                f"unknown key {bad[0]!r} in policy.fragments[{index}]; "
                f"valid choices: {', '.join(sorted(fragment_keys))}"
            )
        if "name" not in raw or "components" not in raw:
            raise ConfigError(f"policy.fragments[{index}] needs 'name' and 'components'")
        fragments.append(FragmentSpec(**raw))
    return DistributionPolicy(
        name=spec.get("name", "custom"),
        fragments=fragments,
        placement=spec.get("placement", "PACK"),
        mode=spec.get("mode", "sync"),
    )
