"""The progress bar redraws at most every half second, not once per iteration: with a redraw per
iteration, runs of short iterations (SAC's one env step each) spent a share of their time
formatting and writing the bar.  The last redraw shows the finished run."""

from __future__ import annotations

import io
from pathlib import Path

import msrl

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml")


def test_the_bar_redraws_at_most_twice_a_second_and_ends_on_the_finished_run(tmp_path: Path) -> None:
    short = ["algo.num_envs=4", "algo.num_steps=8", "algo.num_minibatches=1", "algo.update_epochs=1"]
    stream = io.StringIO()
    sets = [f"runs_dir={tmp_path}", "eval_episodes=0", "checkpoint_every=0", "total_env_steps=3200", *short]
    run = msrl.train(CONFIG, sets, stream=stream)
    draws = [d for d in stream.getvalue().replace("\r", "\n").splitlines() if "steps/s" in d]
    assert run.iterations == 100
    assert 1 <= len(draws) <= run.wall_time / 0.5 + 3, f"{len(draws)} redraws in {run.wall_time:.1f} s"
    assert "3.20k/3.20k" in draws[-1] and "return" in draws[-1]
