"""``executor: cpu-kernel`` in a config: the environments that have the native kernels run on them,
and a machine that cannot build them trains on NumPy after one line saying so."""

from __future__ import annotations

from pathlib import Path

from msrl.app import Trainer

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")
SMALL = ["progress=false", "total_env_steps=4096", "eval_episodes=2", "checkpoint_every=0"]


def _train(tmp_path: Path, *overrides: str) -> tuple[str, list[dict]]:
    """What steps the run's environments (the kernels, or NumPy's physics) and its first records."""
    with Trainer(CONFIG, [f"runs_dir={tmp_path}", *SMALL, "policy.executor=cpu-kernel", *overrides]) as trainer:
        dynamics = trainer.runtime.algorithm.env.dynamics.name
        records = [trainer.step() for _ in range(2)]
    return dynamics, records


def test_a_config_picks_the_native_kernels_with_executor_cpu_kernel(tmp_path: Path) -> None:
    dynamics, records = _train(tmp_path)
    assert dynamics == "kernels"
    assert [r["env_steps"] for r in records] == [2048, 4096] and records[-1]["episode_return"] > 0


def test_without_a_compiler_the_run_trains_on_numpy_after_one_line(tmp_path: Path, monkeypatch, capfd) -> None:
    pendulum = ("algorithm=ppo", "algo.env_id=Pendulum-v1")
    # Pendulum's kernels built in this process with the real compiler first: a module built with
    # another $CXX is not reused, so the fallback below holds even after another test built them
    assert _train(tmp_path / "built", *pendulum)[0] == "kernels"
    capfd.readouterr()
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    dynamics, records = _train(tmp_path / "without", *pendulum)
    assert dynamics != "kernels" and records[-1]["env_steps"] == 4096
    lines = [line for line in capfd.readouterr().err.splitlines() if "cpu-kernel" in line]
    assert len(lines) == 1 and "using the NumPy backend instead" in lines[0], lines
