"""msrl owns the split of work: under every sync preset the same config gives the
components the same per-iteration batch, minibatch, replay capacity and warm-up
as ``local`` (summed over the replicas that share them); each replica builds its
own fragment's components and nothing else; and an algorithm whose env count is
not a per-run quantity gets a one-line error before anything starts, never a
silently doubled batch.

The algorithms here record what their components receive (constructor
arguments, call arguments, rows learned) in ``state_dict`` and log every
construction with the process id, so the test reads what each replica of a
real run got."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

import fragments
import msrl
from msrl.app import load_config, make_runtime, plan

ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers get these classes without importing tests/

REPO = Path(__file__).resolve().parents[2]
SYNC_PRESETS = {
    "single_learner_coarse": ["policy=single_learner_coarse"],
    "single_learner_fine": ["policy=single_learner_fine"],
    "multi_learner": ["policy=multi_learner"],
    "gpu_only": ["policy=gpu_only", "policy.device=cpu"],
    "local": ["policy=local"],
}


def _log(path: str, what: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()} {what}\n")


@dataclass
class ShareConfig:
    num_envs: int = msrl.split(8)
    """Environments in the whole run."""
    replay_capacity: int = msrl.split(64)
    """Transitions the replay holds in the whole run."""
    batch_size: int = msrl.split(16)
    """Transitions sampled per iteration in the whole run."""
    warmup: int = msrl.split(8)
    """Transitions to collect before sampling, in the whole run."""
    num_steps: int = 2
    num_minibatches: int = 2
    log: str = ""


class LoggingEnv(msrl.Environment):
    """A tiny batched env that logs its construction (so does every component here)."""

    def __init__(self, num_envs: int, seed: int = 0, log: str = "") -> None:
        _log(log, f"LoggingEnv {num_envs}")
        self.num_envs, self.seed = num_envs, seed
        self.observation_space = msrl.Box(-1.0, 1.0, (2,))
        self.action_space = msrl.Discrete(2)

    def observe(self) -> msrl.Batched:
        return np.zeros((self.num_envs, 2), np.float32)

    def step(self, action: Any) -> tuple[msrl.Batched, msrl.Batched, msrl.Batched, msrl.Batched]:
        n = self.num_envs
        return np.zeros((n, 2), np.float32), np.ones(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"num_envs": self.num_envs, "seed": self.seed}


class CountingActor(msrl.Actor):
    def __init__(self, log: str = "") -> None:
        _log(log, "CountingActor")

    def act(self, obs: Any) -> msrl.Batched:
        return np.zeros(len(obs), np.int64)

    def set_weights(self, weights: Any) -> msrl.NoValue:
        pass


class RecordingReplay(msrl.Buffer):
    def __init__(self, capacity: int, warmup: int, log: str = "") -> None:
        _log(log, "RecordingReplay")
        self.capacity, self.warmup, self.inserted, self.sampled = capacity, warmup, 0, []

    def insert(self, obs: Any, reward: Any) -> msrl.NoValue:
        self.inserted += len(obs)

    def sample(self, batch_size: int) -> msrl.Batched:
        self.sampled.append(batch_size)
        return torch.zeros(batch_size, 2)

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "warmup": self.warmup, "inserted": self.inserted, "sampled": self.sampled}


class CountingLearner(msrl.Learner):
    def __init__(self, num_minibatches: int, log: str = "") -> None:
        _log(log, "CountingLearner")
        self.num_minibatches, self.rows, self.minibatches = num_minibatches, [], []

    def learn(self, batch: Any) -> msrl.Global:
        self.rows.append(batch.shape[0])
        self.minibatches.append(batch.shape[0] // self.num_minibatches)
        return {"rows": float(batch.shape[0])}

    def get_weights(self) -> msrl.Global:
        return {"w": torch.zeros(1)}

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "minibatches": self.minibatches}


class ShareAlgo(msrl.Algorithm):
    """Off-policy in shape: insert every step, sample a batch, learn, sync."""

    Config = ShareConfig

    def __init__(self, config: ShareConfig, run: msrl.RunInfo) -> None:
        super().__init__(config, run)
        self.env = LoggingEnv(config.num_envs, seed=run.data_seed, log=config.log)
        self.actor = CountingActor(log=config.log)
        self.buffer = RecordingReplay(config.replay_capacity, config.warmup, log=config.log)
        self.learner = CountingLearner(config.num_minibatches, log=config.log)

    def train_step(self) -> dict:
        obs = self.env.observe()
        for _ in msrl.steps(self.config.num_steps):
            obs, reward, terminated, truncated = self.env.step(self.actor.act(obs))
            self.buffer.insert(obs, reward)
        metrics = self.learner.learn(self.buffer.sample(self.config.batch_size))
        self.actor.set_weights(self.learner.get_weights())
        return metrics


def _config(*overrides: str, algorithm: str = "ShareAlgo", log: str = "") -> Any:
    base = {"algorithm": f"{__name__}:{algorithm}", "total_env_steps": 1, "algo": {"log": log} if log else {}}
    return load_config(None, ["progress=false", *overrides], base=base)


def _received(state: dict[str, Any]) -> dict[str, int]:
    """What the components of every replica received, summed over replicas."""
    totals: Counter = Counter()
    for replicas in state.get("_replicas", {"local": [state]}).values():
        for replica in replicas:
            if "env" in replica:
                totals["envs"] += replica["env"]["num_envs"]
            if "buffer" in replica:
                buffer = replica["buffer"]
                totals["replay capacity"] += buffer["capacity"]
                totals["warm-up"] += buffer["warmup"]
                totals["sampled per iteration"] += buffer["sampled"][0]
                totals["inserted per iteration"] += buffer["inserted"]
            if "learner" in replica:
                totals["batch learned"] += replica["learner"]["rows"][0]
                totals["minibatch"] += replica["learner"]["minibatches"][0]
    return dict(totals)


def _constructions(log: Path) -> dict[int, Counter]:
    per_process: dict[int, Counter] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        pid, what = line.split(" ", 1)
        per_process.setdefault(int(pid), Counter())[what.split(" ")[0]] += 1
    return per_process


SLOW_SHARES = ("single_learner_fine", "gpu_only")  # under -m slow: the suite's 6-minute budget


@pytest.mark.parametrize(  # the presets asking for most CPUs first: no Ray restart
    "preset", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_SHARES else p for p in SYNC_PRESETS]
)
def test_every_sync_preset_gives_components_what_local_gives(preset: str, tmp_path: Path) -> None:
    log = tmp_path / "constructed.log"
    runtime = make_runtime(plan(_config(*SYNC_PRESETS[preset], "seed=5", log=str(log))))
    try:
        result = runtime.run_iteration()
        state = runtime.state_dict()
    finally:
        runtime.close()
    assert result.env_steps == 8 * 2
    # The first replica of a fragment gets the run's seed (so one replica reproduces local), the others their own.
    seeds = [
        replica["env"]["seed"]
        for replicas in state.get("_replicas", {"local": [state]}).values()
        for replica in replicas
        if "env" in replica
    ]
    assert seeds[0] == 5 and len(set(seeds)) == len(seeds) == {"local": 1, "gpu_only": 1}.get(preset, 2)
    assert _received(state) == {
        "envs": 8,
        "replay capacity": 64,
        "warm-up": 8,
        "sampled per iteration": 16,
        "inserted per iteration": 16,
        "batch learned": 16,
        "minibatch": 8,
    }
    # Every process built its own fragment's components, once, and nothing else; the driver
    # built nothing unless it runs the fragment itself.
    built = _constructions(log)
    assert sorted(sorted(counts.elements()) for counts in built.values()) == sorted(BUILT_BY_PROCESS[preset])
    assert (os.getpid() in built) == (preset == "local")


ALL = ["CountingActor", "CountingLearner", "LoggingEnv", "RecordingReplay"]
ROLLOUT = ["CountingActor", "LoggingEnv", "RecordingReplay"]
BUILT_BY_PROCESS = {  # preset -> the components each of its processes constructs
    "local": [ALL],
    "gpu_only": [ALL],
    "single_learner_coarse": [ROLLOUT, ROLLOUT, ["CountingLearner"]],
    "single_learner_fine": [["LoggingEnv"], ["LoggingEnv"], ["CountingActor", "CountingLearner", "RecordingReplay"]],
    "multi_learner": [ALL, ALL],
}


# -- an env count that is not a per-run quantity --------------------------------------------------------
@dataclass
class NamedConfig:
    n_envs: int = 8
    """Named unlike num_envs and not declared with msrl.split."""
    num_steps: int = 2


@dataclass
class SplitNamedConfig(NamedConfig):
    n_envs: int = msrl.split(8)


@dataclass
class PropertyConfig:
    envs_per_group: int = 4
    groups: int = 2
    num_steps: int = 2

    @property
    def num_envs(self) -> int:
        return self.envs_per_group * self.groups


@dataclass
class SplitPropertyConfig(PropertyConfig):
    groups: int = msrl.split(2)


class _OnPolicyShape(msrl.Algorithm):
    def train_step(self) -> dict:
        obs = self.env.observe()
        for _ in msrl.steps(self.config.num_steps):
            obs, reward, terminated, truncated = self.env.step(self.actor.act(obs))
        self.actor.set_weights(self.learner.get_weights())
        return {}


class NamedEnvs(_OnPolicyShape):
    Config = NamedConfig

    def __init__(self, config: Any, run: msrl.RunInfo) -> None:
        super().__init__(config, run)
        self.env = LoggingEnv(config.n_envs, seed=run.data_seed)
        self.actor = CountingActor()
        self.learner = CountingLearner(1)


class SplitNamedEnvs(NamedEnvs):
    Config = SplitNamedConfig


class PropertyEnvs(_OnPolicyShape):
    Config = PropertyConfig

    def __init__(self, config: Any, run: msrl.RunInfo) -> None:
        super().__init__(config, run)
        self.env = msrl.envs.make("CartPole-v1", config.num_envs, seed=run.data_seed)
        self.actor = CountingActor()
        self.learner = CountingLearner(1)


class SplitPropertyEnvs(PropertyEnvs):
    Config = SplitPropertyConfig


@pytest.mark.parametrize("algorithm", ["NamedEnvs", "PropertyEnvs"])
def test_an_env_count_that_is_not_split_is_refused_before_anything_starts(algorithm: str) -> None:
    with pytest.raises(msrl.ConfigError) as info:
        plan(_config("policy=single_learner_coarse", algorithm=algorithm))
    message = str(info.value)
    assert (
        "environment 'env' steps 8 environments in each of the 2 replicas of fragment 'rollout' (16 in all) "
        "where the run steps 8" in message
    )
    assert "msrl.split" in message and "\n" not in message


@pytest.mark.parametrize(  # the Ray case (about 11 s) under -m slow: the suite's 6-minute budget
    "algorithm, on_ray", [("SplitNamedEnvs", False), pytest.param("SplitPropertyEnvs", True, marks=pytest.mark.slow)]
)
def test_a_split_field_of_any_name_or_a_property_over_one_gets_the_framework_split(
    algorithm: str, on_ray: bool
) -> None:
    """``n_envs = msrl.split(8)``, or a property over ``groups = msrl.split(2)``: each of the two rollout
    replicas gets 4 environments, as the worker builds them (``fragments.build_replica``) and, for one
    of the two, in a real run."""
    run_plan = plan(_config("policy=single_learner_coarse", algorithm=algorithm))
    built = [fragments.build_replica(run_plan.recipe, run_plan.fdg, "rollout", replica) for replica in range(2)]
    assert [replica.components["env"].num_envs for replica in built] == [4, 4]
    assert all(replica.components.keys() == {"env", "actor"} for replica in built)
    if on_ray:
        runtime = make_runtime(run_plan)
        try:
            assert runtime.run_iteration().env_steps == 8 * 2  # the run's 8 environments, not 16
        finally:
            runtime.close()


def test_the_cli_reports_an_unsplit_env_count_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    config = tmp_path / "named.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "algorithm": "test_shares:NamedEnvs",
                "policy": "single_learner_coarse",
                "runs_dir": str(tmp_path / "runs"),
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "msrl", "train", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msrl: error: environment 'env' steps 8 environments"), lines
    assert not (tmp_path / "runs").exists()
