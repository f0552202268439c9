"""``python -m benchmarks.halfcheetah_1m RUN_DIR...`` reads finished ``msrl train`` run directories
back into BENCHMARKS.md's HalfCheetah figures: the greedy return, CleanRL's measure (the mean of the
last 100 training episodes), the steps where training first passes its milestones, and the summed
wall time; an unfinished run is one line naming it.  The run directories here are written by hand
with known episode returns, so every figure has a value computed beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.halfcheetah_1m import main, summarize


def _run_dir(root: Path, algorithm: str, seed: int, returns: list[float], finished: bool = True) -> Path:
    """A run of ``returns``: one episode ended every 1,000 env steps, one iteration per 500 steps."""
    run = root / f"{algorithm}_s{seed}" / f"{algorithm}_halfcheetah"
    run.mkdir(parents=True)
    config = {"name": f"{algorithm}_halfcheetah", "algorithm": algorithm, "seed": seed}
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with open(run / "metrics.jsonl", "w", encoding="utf-8") as out:
        for episode, value in enumerate(returns):
            for half in range(2):
                record = {
                    "iteration": 2 * episode + half,
                    "env_steps": 1000 * episode + 500 * (half + 1),
                    "wall_time": 0.5,
                }
                if half:
                    record["episode_return"] = value
                out.write(json.dumps(record) + "\n")
        out.write('{"iteration": 99')  # an interrupted last write is skipped
    if finished:
        evaluation = {"episodes": 2, "returns": [returns[-1] + 100.0, returns[-1] + 300.0], "mean": returns[-1] + 200.0}
        (run / "eval.json").write_text(json.dumps(evaluation), encoding="utf-8")
    return run


def test_a_run_reads_back_as_its_figures(tmp_path: Path) -> None:
    returns = [float(40 * i) for i in range(300)]  # 0, 40, ..., 11,960: one episode every 1,000 steps
    record = summarize(_run_dir(tmp_path, "td3", 2, returns))
    assert record["config"] == "td3_halfcheetah" and record["seed"] == 2
    assert record["env_steps"] == 300_000
    assert record["greedy_mean"] == pytest.approx(returns[-1] + 200.0)
    assert record["train_last100_mean"] == pytest.approx(sum(returns[-100:]) / 100)
    # 5,000 first at episode 125 (40 x 125), which ends at 126,000 steps; 9,000 at 225; 10,000 at 250
    assert record["first_training_episode_at"] == {"5000": 126_000, "9000": 226_000, "10000": 251_000}
    # the mean of 10 episodes i-9..i is 40 (i - 4.5): 3,000 first at i = 80 (3,020), ending at 81,000
    assert record["last10_reaches_3000_at"] == 81_000
    assert record["wall_s"] == pytest.approx(300.0)
    assert len(record["training_episodes"]) == 300


def test_the_report_gives_each_config_over_its_seeds_beside_cleanrl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_run_dir(tmp_path, "ddpg", seed, [1000.0 * seed] * 120) for seed in (1, 2)]
    figures = tmp_path / "figures"
    assert main([str(run) for run in runs] + ["--figures", str(figures)]) == 0
    out = capsys.readouterr().out
    assert "| ddpg_halfcheetah | 2 | 2,200.0 ± 100.0 | 2,000.0 |" in out  # seed 2's own row
    # over both seeds: greedy 1,200 and 2,200, last 100 training 1,000 and 2,000 (sample std 707.1),
    # CleanRL's DDPG beside
    assert "| ddpg_halfcheetah | 2 | 1,700.0 ± 707.1 | 1,500.0 ± 707.1 | 10,374.1 ± 157.4 |" in out
    saved = json.loads((figures / "ddpg_halfcheetah_1m_seed2.json").read_text(encoding="utf-8"))
    assert saved["train_last100_mean"] == pytest.approx(2000.0)


def test_an_unfinished_run_is_one_line(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, "td3", 3, [0.0] * 120, finished=False)
    with pytest.raises(SystemExit) as exit_info:
        main([str(run)])
    assert str(exit_info.value).startswith("msrl: error: ") and "eval.json" in str(exit_info.value)
