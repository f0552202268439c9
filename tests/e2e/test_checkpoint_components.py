"""A verified checkpoint must also be complete: one whose manifest matches but that lacks
a component's state (a tool that dropped it, a hand-edited file re-saved) is refused by ``msrl
eval`` and ``--resume`` with one line, instead of evaluating an untrained network or resuming with
a fresh component."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

import msrl
from msrl.app import load_checkpoint, main, save_checkpoint

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    run = msrl.train(
        CONFIG,
        [f"runs_dir={tmp_path_factory.mktemp('runs')}", "progress=false", "eval_episodes=0", "total_env_steps=2048"],
    )
    return load_checkpoint(run.checkpoint)


def run_cli(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue()


@pytest.mark.parametrize("component", ["actor", "learner"])
def test_a_checkpoint_without_a_trained_component_is_refused_by_eval(
    saved: dict, tmp_path: Path, component: str
) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(
        str(path), {**saved, "components": {k: v for k, v in saved["components"].items() if k != component}}
    )
    assert load_checkpoint(str(path))  # its manifest matches: only completeness is wrong
    code, err = run_cli(["eval", str(path), "--episodes", "1"])
    assert code == 2
    assert (
        err.strip() == f"msrl: error: checkpoint has no state for {component} {component!r} of PPO; "
        "it cannot be evaluated or loaded"
    )


def test_a_checkpoint_without_its_buffer_is_refused_by_resume_and_left_as_it_was(saved: dict, tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(str(path), {**saved, "components": {k: v for k, v in saved["components"].items() if k != "buffer"}})
    before = path.read_bytes()
    code, err = run_cli(["train", "--resume", str(path), "--set", "total_env_steps=4096"])
    assert code == 2 and err.count("\n") == 1
    assert "checkpoint has no state for component(s) 'buffer' of algorithm 'ppo'" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # nothing written beside it


def test_the_complete_checkpoint_re_saved_still_evaluates(saved: dict, tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(str(path), dict(saved))
    code, err = run_cli(["eval", str(path), "--episodes", "1"])
    assert code == 0, err
