"""Every fragment's executor and device are checked in the driver, before anything starts, so that
a mismatch (the cpu executor on a cuda device, say) is one line there rather than a traceback and
SIGABRT in a Ray worker.

Asking for a GPU picks the torch executor unless one is named (``single_learner_coarse`` with
``learner_gpus: 1`` gives its learner the torch executor).  What can be checked without
the fragment's machine (an unknown executor, a device torch does not name, an executor that does
not run on the device) fails in ``plan()`` for every fragment, in one line.  Whether a machine has
the GPU is checked where the fragment runs: the driver of a cluster may have none.
"""

from __future__ import annotations

import pytest
import torch

from fragments.executors import check_fragment
from msrl.app import load_config, plan
from msrl.core import ConfigError, MsrlError
from policies import FragmentSpec, load_policy

SMALL = ["algo.num_envs=4", "algo.num_steps=4", "algo.num_minibatches=2"]
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where torch sees no GPU")


def ppo_plan(policy: object) -> object:
    return plan(load_config(None, SMALL, base={"algorithm": "ppo", "policy": policy}))


# -- presets: a GPU asked for gets an executor that runs on it ------------------------------------------
@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"preset": "single_learner_coarse", "learner_gpus": 1}, "learner"),
        ({"preset": "async_single_learner", "learner_gpus": 1}, "learner"),
        ({"preset": "single_learner_fine", "learner_gpus": 1}, "learner"),
        ({"preset": "single_learner_coarse", "learner_device": "cuda:0"}, "learner"),
        ({"preset": "multi_learner", "gpus": 1}, "worker"),
        ({"preset": "local", "device": "cuda"}, "local"),
    ],
)
def test_a_fragment_on_a_gpu_defaults_to_the_torch_executor(spec: dict, fragment: str) -> None:
    chosen = load_policy(spec).fragment(fragment)
    assert chosen.executor == "torch" and chosen.device.startswith("cuda")


@pytest.mark.parametrize(
    "spec, fragment, executor",
    [
        ("single_learner_coarse", "learner", "cpu"),  # on the CPU the default is the cpu executor
        ("multi_learner", "worker", "cpu"),
        ("local", "local", "cpu"),
        ({"preset": "local", "executor": "cuda"}, "local", "cuda"),
        ({"preset": "single_learner_coarse", "learner_gpus": 1, "learner_executor": "cuda"}, "learner", "cuda"),
    ],
)
def test_executors_named_or_on_the_cpu_are_kept(spec: object, fragment: str, executor: str) -> None:
    assert load_policy(spec).fragment(fragment).executor == executor


def test_a_gpu_learner_plans_on_a_driver_without_a_gpu() -> None:
    """The driver checks the learner's executor and device, not that it has the learner's GPU."""
    run_plan = ppo_plan({"preset": "single_learner_coarse", "learner_gpus": 1})
    learner = run_plan.fdg.policy.fragment("learner")
    assert (learner.executor, learner.device, learner.resources["GPU"]) == ("torch", "cuda", 1.0)


# -- pre-flight: refused in plan(), for remote fragments too ---------------------------------------------
@pytest.mark.parametrize(
    "policy, words",
    [
        (
            {"preset": "single_learner_coarse", "learner_gpus": 1, "learner_executor": "cpu"},
            "fragment 'learner': the cpu executor runs on device cpu, got 'cuda'; "
            "valid choices: device=cpu, or executor=torch",
        ),
        (
            {"preset": "multi_learner", "device": "cuda", "executor": "cpu"},
            "fragment 'worker': the cpu executor runs on device cpu",
        ),
        (
            {"preset": "single_learner_fine", "learner_executor": "cuda", "learner_device": "cpu"},
            "fragment 'learner': the cuda executor runs on device cuda, got 'cpu'",
        ),
        (
            {"preset": "single_learner_coarse", "learner_device": "gpu"},
            "fragment 'learner': invalid torch device 'gpu'; valid choices: cpu, cuda, cuda:N",
        ),
        (
            {"preset": "single_learner_coarse", "learner_device": "meta"},
            "fragment 'learner': unsupported device 'meta'",
        ),
        (
            {"preset": "single_learner_coarse", "actor_executor": "tpu"},
            "fragment 'rollout': unknown executor 'tpu'; valid choices: cpu, cpu-kernel, cuda, torch",
        ),
        (
            {
                "fragments": [
                    {"name": "a", "components": ["env", "actor", "buffer"], "replicas": 2},
                    {
                        "name": "b",
                        "components": ["learner"],
                        "executor": "cpu",
                        "device": "cuda:1",
                        "resources": {"GPU": 1},
                    },
                ]
            },
            "fragment 'b': the cpu executor runs on device cpu, got 'cuda:1'",
        ),
    ],
)
def test_remote_fragments_are_checked_in_the_driver(policy: dict, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        ppo_plan(policy)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_a_device_must_be_a_name() -> None:
    with pytest.raises(ConfigError, match="device must be a torch device name, got 0"):
        FragmentSpec("a", ["*"], device=0)  # type: ignore[arg-type]


def test_the_checks_are_msrl_errors_the_cli_prints_in_one_line() -> None:
    spec = FragmentSpec("learner", ["learner"], executor="cpu", device="cuda")
    with pytest.raises(MsrlError):
        check_fragment(spec, on_this_machine=False)


@NO_GPU
def test_the_machine_is_checked_only_where_the_fragment_runs() -> None:
    spec = FragmentSpec("learner", ["learner"], executor="torch", device="cuda", resources={"GPU": 1})
    check_fragment(spec, on_this_machine=False)  # the driver of a cluster: its workers may have the GPU
    with pytest.raises(ConfigError, match="fragment 'learner' asks for device 'cuda' but torch sees no CUDA GPU"):
        check_fragment(spec, on_this_machine=True)


@NO_GPU
def test_a_local_run_on_a_gpu_is_refused_here_in_plan() -> None:
    with pytest.raises(ConfigError, match="torch sees no CUDA GPU"):
        ppo_plan({"preset": "local", "device": "cuda"})
