"""The cluster launch files in examples/cluster/, checked offline.

``ray-up.yaml`` goes through Ray's own checks (the JSON schema the cluster launcher validates
against, then ``prepare_config`` and ``validate_config`` as ``ray up`` runs them before it calls
the cloud).  ``rayjob.yaml`` is checked for the fields KubeRay's RayJob needs.  The DP config both
run loads with msrl's config loader and is planned (traced and cut into fragments), and each of its
fragments fits the node type meant for it, and no other, in both files."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from msrl.app import load_config, plan

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "cluster"
RAY_UP = EXAMPLES / "ray-up.yaml"
RAYJOB = EXAMPLES / "rayjob.yaml"
DOCKERFILE = EXAMPLES / "Dockerfile"
DP_CONFIG = EXAMPLES / "ppo_cartpole_cluster.yaml"
IMAGE_REPO = "/home/ray/msrl"
"""Where the Dockerfile puts the repository in the image (rayjob.yaml's entrypoint reads the config there)."""


def read(path: Path) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


def cluster_policy():
    return load_config(str(DP_CONFIG)).policy


def fragment_with(policy, component: str):
    [fragment] = [f for f in policy.fragments if component in f.components]
    return fragment


def fits(asked: dict[str, float], offered: dict[str, float]) -> bool:
    return all(offered.get(key, 0) >= amount for key, amount in asked.items() if amount > 0)


def only_home(fragment, nodes: dict[str, dict[str, float]]) -> str:
    """The one node type a replica of ``fragment`` fits on (an assertion error if none or several)."""
    homes = [name for name, offered in nodes.items() if fits(fragment.resources, offered)]
    assert len(homes) == 1, f"fragment {fragment.name} {fragment.resources} fits {homes} of {nodes}"
    return homes[0]


# -- ray up --------------------------------------------------------------------------------------------
def test_ray_up_passes_rays_own_validation():
    jsonschema = pytest.importorskip("jsonschema")
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = read(RAY_UP)
    with open(os.path.join(os.path.dirname(ray.autoscaler.__file__), "ray-schema.json")) as f:
        jsonschema.validate(raw, json.load(f))  # the file as written: no unknown or misspelled keys
    prepared = prepare_config(copy.deepcopy(raw))  # merged with the provider's defaults, as `ray up` does
    validate_config(prepared)
    assert prepared["provider"]["type"] == "aws" and prepared["provider"]["region"]
    assert set(prepared["available_node_types"]) == {"head", "cpu", "gpu"}
    assert prepared["head_node_type"] == "head"


def test_ray_up_node_types_advertise_the_custom_resources():
    types = read(RAY_UP)["available_node_types"]
    assert types["head"]["resources"] == {"CPU": 0}  # the driver only
    gpu, cpu = types["gpu"]["resources"], types["cpu"]["resources"]
    assert gpu["GPU"] >= 1 and gpu["learner_gpu"] >= 1 and "rollout_cpu" not in gpu
    assert cpu["rollout_cpu"] == cpu["CPU"] >= 1 and "GPU" not in cpu and "learner_gpu" not in cpu
    for name in ("cpu", "gpu"):  # msrl does not wait for the autoscaler: the workers are up from the start
        assert types[name]["min_workers"] == types[name]["max_workers"] >= 1, name


def test_ray_up_keeps_token_authentication_on():
    raw = read(RAY_UP)
    assert raw["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    starts = [c for c in raw["head_start_ray_commands"] + raw["worker_start_ray_commands"] if "ray start" in c]
    assert len(starts) == 2
    for command in starts:
        assert "RAY_AUTH_MODE=token ray start" in command, command
    text = RAY_UP.read_text()
    assert "RAY_AUTH_MODE=disabled" not in text
    assert "--dashboard-host=127.0.0.1" in raw["head_start_ray_commands"][-1]
    assert "pip install -q -c ~/msrl/constraints.txt -e ~/msrl" in raw["setup_commands"]
    assert raw["file_mounts"]["~/msrl"] == "."


# -- the DP config -------------------------------------------------------------------------------------
def test_the_cluster_config_loads_plans_and_puts_the_learner_on_the_gpu_nodes():
    config = load_config(str(DP_CONFIG))
    fdg = plan(config).fdg  # traced and partitioned: every component is placed, every build checked
    learner, rollout = fdg.policy.fragment("learner"), fdg.policy.fragment("rollout")
    assert learner.components == ["learner"] and learner.device == "cuda" and learner.executor == "torch"
    assert learner.resources["learner_gpu"] == 1 and learner.resources["GPU"] == 1
    assert rollout.components == ["env", "actor", "buffer"] and rollout.device == "cpu"
    assert rollout.resources["rollout_cpu"] == 1 and "GPU" not in rollout.resources
    assert "learner_gpu" not in rollout.resources
    assert config.algo.num_envs % rollout.replicas == 0


def test_each_fragment_fits_only_its_ray_up_node_type_and_all_replicas_fit():
    types = read(RAY_UP)["available_node_types"]
    offered = {name: node["resources"] for name, node in types.items()}
    policy = cluster_policy()
    assert only_home(fragment_with(policy, "learner"), offered) == "gpu"
    assert only_home(fragment_with(policy, "env"), offered) == "cpu"
    for fragment in policy.fragments:
        home = only_home(fragment, offered)
        for key, amount in fragment.resources.items():
            capacity = offered[home].get(key, 0) * types[home]["min_workers"]
            assert amount * fragment.replicas <= capacity, (fragment.name, key)


# -- KubeRay RayJob ------------------------------------------------------------------------------------
def rayjob_groups() -> dict[str, dict]:
    cluster = read(RAYJOB)["spec"]["rayClusterSpec"]
    return {"head": cluster["headGroupSpec"], **{g["groupName"]: g for g in cluster["workerGroupSpecs"]}}


def start_resources(group: dict) -> dict[str, float]:
    """``rayStartParams.resources``, KubeRay's quoted JSON string, as ``ray start --resources`` reads it."""
    value = group["rayStartParams"].get("resources")
    if value is None:
        return {}
    [unquoted] = shlex.split(value)
    return json.loads(unquoted)


def offered_by(group: dict) -> dict[str, float]:
    """What a pod of ``group`` advertises to Ray: CPUs from ``num-cpus`` or the container's CPU limit,
    GPUs from its ``nvidia.com/gpu`` limit, and the custom resources."""
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    cpus = group["rayStartParams"].get("num-cpus", limits.get("cpu", 0))
    offer = {"CPU": float(cpus), "GPU": float(limits.get("nvidia.com/gpu", 0))}
    return {**offer, **start_resources(group)}


def test_rayjob_has_the_fields_kuberay_requires():
    job = read(RAYJOB)
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"])  # a DNS-1123 label
    spec = job["spec"]
    assert spec["entrypoint"].strip() and spec["shutdownAfterJobFinishes"] is True
    cluster = spec["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"}  # token authentication on (KubeRay >= 1.5.1)
    head = cluster["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict)
    assert head["template"]["spec"]["containers"][0]["image"]
    assert {g["groupName"] for g in cluster["workerGroupSpecs"]} == {"cpu", "gpu"}
    for group in cluster["workerGroupSpecs"]:
        assert group["groupName"] and isinstance(group["rayStartParams"], dict), group
        assert group["minReplicas"] == group["replicas"] == group["maxReplicas"] >= 1, group["groupName"]
        container = group["template"]["spec"]["containers"][0]
        assert container["image"] == head["template"]["spec"]["containers"][0]["image"]
        assert container["resources"]["limits"]["cpu"], group["groupName"]
        for value in group["rayStartParams"].values():
            assert isinstance(value, str), group["rayStartParams"]  # KubeRay takes strings only


def test_rayjob_worker_groups_advertise_the_custom_resources():
    groups = rayjob_groups()
    gpu, cpu = offered_by(groups["gpu"]), offered_by(groups["cpu"])
    assert gpu["GPU"] >= 1 and gpu["learner_gpu"] >= 1 and "rollout_cpu" not in gpu
    assert cpu["rollout_cpu"] == cpu["CPU"] >= 1 and cpu["GPU"] == 0 and "learner_gpu" not in cpu
    gpu_limits = groups["gpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu_limits["nvidia.com/gpu"] == "1"
    assert offered_by(groups["head"]) == {"CPU": 0.0, "GPU": 0.0}
    policy = cluster_policy()
    offered = {name: offered_by(group) for name, group in groups.items()}
    assert only_home(fragment_with(policy, "learner"), offered) == "gpu"
    assert only_home(fragment_with(policy, "env"), offered) == "cpu"
    rollout = fragment_with(policy, "env")
    assert rollout.replicas <= offered["cpu"]["rollout_cpu"] * groups["cpu"]["replicas"]


def test_rayjob_entrypoint_trains_the_cluster_config():
    words = shlex.split(read(RAYJOB)["spec"]["entrypoint"])
    assert words[:2] == ["msrl", "train"]
    assert words[words.index("--address") + 1] == "auto"
    config_path = words[2]
    assert config_path.startswith(IMAGE_REPO + "/"), config_path
    assert f"COPY --chown=ray:users . {IMAGE_REPO}" in DOCKERFILE.read_text()
    in_repo = REPO / config_path[len(IMAGE_REPO) + 1 :]
    assert in_repo == DP_CONFIG and in_repo.is_file()
    overrides = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    config = load_config(str(in_repo), overrides)
    assert os.path.isabs(config.run.runs_dir)  # outlives the job's temporary working directory
    assert fragment_with(config.policy, "learner").resources["learner_gpu"] == 1


def test_ray_versions_agree_across_the_launch_files():
    """The image in ray-up.yaml, the Dockerfile's base image and the RayJob's rayVersion name one Ray."""
    version = str(read(RAYJOB)["spec"]["rayClusterSpec"]["rayVersion"])
    image = f"rayproject/ray:{version}-py311-gpu"
    assert read(RAY_UP)["docker"]["image"] == image
    assert f"FROM {image}\n" in DOCKERFILE.read_text()
