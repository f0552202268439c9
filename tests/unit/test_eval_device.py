"""A state saved on a GPU loads on the CPU: a ``policy=gpu_only`` run's final evaluation, ``msrl
eval``, ``msrl.load`` and a resume load the worker's state into a CPU copy of the algorithm, whose
generators refuse a CUDA generator's state as it is (``Expected a CPUGeneratorImplState of size 5056
but found the input RNG state size to be 16``).

A CUDA generator's ``get_state()`` is 16 bytes (its Philox seed and offset, 8 bytes each, on the
host); a CPU generator's is the Mersenne Twister's 5056.  No GPU is needed to exercise this: the
states below are the CPU-made ones with every generator state replaced by a CUDA-format one, as a
``gpu_only`` worker on a GPU hands them back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import fragments
import msrl
from msrl.app import CHECKPOINT_NAME, Trainer, load_config, plan
from msrl.core import role_of
from msrl.rl import load_generator_state

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
CPU_STATE_BYTES = torch.Generator().get_state().numel()


def cuda_generator_state(seed: int, offset: int = 0) -> torch.Tensor:
    """What ``torch.Generator("cuda").get_state()`` returns: seed and offset as 16 host bytes."""
    return torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8).clone()


def as_saved_on_a_gpu(state: Any) -> Any:
    """``state`` with every (CPU) generator state replaced by a CUDA-format one."""
    if isinstance(state, dict):
        return {key: as_saved_on_a_gpu(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(as_saved_on_a_gpu(value) for value in state)
    if isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and state.numel() == CPU_STATE_BYTES:
        return cuda_generator_state(int(state[:8].view(torch.int64)), offset=4 * 17)
    return state


def count_generator_states(state: Any, size: int) -> int:
    if isinstance(state, dict):
        return sum(count_generator_states(value, size) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(count_generator_states(value, size) for value in state)
    return int(isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and state.numel() == size)


# -- the shared helper -----------------------------------------------------------------------------------
def test_a_state_of_the_generators_own_kind_is_restored_exactly() -> None:
    generator = torch.Generator().manual_seed(5)
    torch.rand(7, generator=generator)
    saved = generator.get_state()
    expected = torch.rand(4, generator=generator)
    other = torch.Generator().manual_seed(99)
    load_generator_state(other, saved)
    assert torch.equal(torch.rand(4, generator=other), expected)


def test_a_cuda_state_seeds_a_cpu_generator_deterministically() -> None:
    plain = torch.Generator()
    with pytest.raises(RuntimeError, match="CPUGeneratorImplState of size"):
        plain.set_state(cuda_generator_state(1))  # set_state alone: torch refuses a CUDA state
    draws = []
    for state in (
        cuda_generator_state(1),
        cuda_generator_state(1),
        cuda_generator_state(1, offset=8),
        cuda_generator_state(2),
    ):
        generator = torch.Generator().manual_seed(0)
        load_generator_state(generator, state)
        draws.append(torch.rand(4, generator=generator))
    assert torch.equal(draws[0], draws[1])  # the same saved state, the same stream
    assert not torch.equal(draws[0], draws[2]) and not torch.equal(draws[0], draws[3])  # another state, another stream
    fresh = torch.rand(4, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(draws[0], fresh)  # not left as it was


@pytest.mark.parametrize(
    "state, words",
    [
        (torch.zeros(40, dtype=torch.uint8), "neither a CPU's"),
        (torch.zeros(16, dtype=torch.int64), "1-D uint8 tensor"),
        (torch.zeros(2, 8, dtype=torch.uint8), "1-D uint8 tensor"),
    ],
)
def test_a_state_of_no_known_kind_is_refused(state: torch.Tensor, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        load_generator_state(torch.Generator(), state)


# -- every algorithm ---------------------------------------------------------------------------------------
SMALL = {  # config -> overrides that keep building it cheap
    "ppo_cartpole": ["algo.num_envs=4", "algo.num_minibatches=4"],
    "ppo_pendulum": ["algo.num_envs=4", "algo.num_minibatches=4"],
    "a2c_cartpole": ["algo.num_envs=4"],
    "dqn_cartpole": ["algo.buffer_size=1000"],
    "sac_pendulum": ["algo.buffer_size=1000"],
    "impala_cartpole": ["policy=local", "algo.num_envs=4", "algo.num_minibatches=4"],
    "mappo_simple_spread": ["algo.num_envs=4"],
    "ippo_tag": ["algo.num_envs=4", "algo.num_minibatches=4"],
}


def build(name: str) -> Any:
    recipe = plan(load_config(str(CONFIGS / f"{name}.yaml"), SMALL[name])).recipe
    return recipe.algorithm(recipe.config, fragments.run_info(recipe, None, None))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_algorithm_loads_state_saved_on_a_gpu(name: str) -> None:
    """Actors, learners and buffers: the generator states they save go through one helper."""
    saved = {component: c.state_dict() for component, c in build(name).components().items() if role_of(c) != "env"}
    on_gpu = as_saved_on_a_gpu(saved)
    assert count_generator_states(on_gpu, 16) >= 1 and count_generator_states(on_gpu, CPU_STATE_BYTES) == 0
    copy = build(name)
    for component, state in on_gpu.items():
        copy.components()[component].load_state_dict(state)


# -- through the public API: final evaluation, msrl.evaluate / msrl.load, resume ----------------------------
class GpuWorkerRuntime:
    """A runtime whose state comes back as a ``gpu_only`` worker's on a GPU does, and which holds
    no algorithm in this process (so evaluation builds a copy and loads that state into it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def state_dict(self) -> dict[str, Any]:
        return as_saved_on_a_gpu(self.inner.state_dict())

    def run_iteration(self, more: bool = False) -> Any:
        return self.inner.run_iteration(more=more)

    def close(self) -> None:
        self.inner.close()


OVERRIDES = [
    "progress=false",
    "eval_episodes=0",
    "algo.num_envs=4",
    "algo.num_steps=16",
    "algo.num_minibatches=4",
    "algo.update_epochs=1",
    "total_env_steps=128",
    "checkpoint_every=0",
]


def test_evaluation_resume_and_load_of_a_state_saved_on_a_gpu(tmp_path: Path) -> None:
    with Trainer(str(CONFIGS / "ppo_cartpole.yaml"), [f"runs_dir={tmp_path}", *OVERRIDES]) as trainer:
        trainer.runtime = GpuWorkerRuntime(trainer.runtime)
        trainer.step()
        evaluation = trainer.evaluate(episodes=2)  # loads the GPU-format states into a CPU copy
        assert evaluation.episodes == 2
        trainer.save()
        checkpoint = Path(trainer.run_dir) / CHECKPOINT_NAME
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)["components"]
    assert count_generator_states(saved, 16) >= 2 and count_generator_states(saved, CPU_STATE_BYTES) == 0

    assert msrl.evaluate(checkpoint, episodes=2).episodes == 2  # what `msrl eval CHECKPOINT` runs
    loaded = msrl.load(checkpoint)
    assert loaded.actor.greedy(torch.zeros(3, 4)).shape == (3,)
    with Trainer(None, ["total_env_steps=192"], resume=checkpoint) as resumed:  # resumed on the CPU
        assert resumed.env_steps == 64
        resumed.step()
        assert resumed.env_steps == 128


def test_a_torch_environment_resumes_from_a_generator_state_saved_on_a_gpu() -> None:
    """The torch env backend's generator goes through the same loader (it raised 'unusable torch
    generator state' for a CUDA state): resuming an env checkpoint on the other kind of device."""
    import msrl.envs

    saved = msrl.envs.make("CartPole-v1", 4, seed=1, backend="torch").state_dict()
    saved["rng"] = cuda_generator_state(seed=5)
    # two environments built on different seeds draw different starts until the checkpoint's
    # generator replaces theirs: equal resets afterwards come from the restored generator alone
    first, second = (msrl.envs.make("CartPole-v1", 4, seed=seed, backend="torch") for seed in (2, 3))
    assert not torch.equal(first.reset(), second.reset())
    first.load_state_dict(saved)
    second.load_state_dict(saved)
    assert torch.equal(first.reset(), second.reset())  # the same stream from the same checkpoint


def test_a_closed_trainer_says_so_instead_of_reading_stopped_workers(tmp_path: Path) -> None:
    """After ``close`` a distributed run's weights are gone with its workers, so evaluating,
    stepping or saving names the cause rather than reporting a state missing from them."""
    trainer = Trainer(str(CONFIGS / "ppo_cartpole.yaml"), [f"runs_dir={tmp_path}", *OVERRIDES])
    trainer.step()
    assert trainer.evaluate(episodes=1).episodes == 1
    trainer.close()
    for action in (lambda: trainer.evaluate(episodes=1), trainer.step, trainer.save):
        with pytest.raises(RuntimeError, match=r"after close\(\)"):
            action()
