"""``msrl plan`` and ``policy: auto``: every built-in algorithm and the user algorithm in examples/
is calibrated, every candidate policy predicted from its traced graph and ranked; a recorded
calibration ranks the same every time; an ``auto`` run trains under the plan's first row and
records the plan; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
import yaml

import msrl
from msrl.app import (
    calibrate_run,
    hypothetical_cluster,
    load_config,
    main,
    rank_policies,
    read_calibration,
    this_machine,
)
from msrl.core import ConfigError

SMALL = {  # each config at a size whose calibration takes a second or two
    "configs/ppo_cartpole.yaml": ["algo.num_envs=8", "algo.num_steps=16", "algo.num_minibatches=2"],
    "configs/a2c_cartpole.yaml": [],
    "configs/dqn_cartpole.yaml": ["algo.learning_starts=200", "algo.buffer_size=1000"],
    "configs/sac_pendulum.yaml": ["algo.learning_starts=20", "algo.hidden_sizes=[32,32]", "algo.batch_size=32"],
    "configs/impala_cartpole.yaml": ["algo.num_envs=8", "algo.num_steps=8", "algo.num_minibatches=2"],
    "configs/mappo_simple_spread.yaml": ["algo.num_envs=8", "algo.num_steps=10", "algo.update_epochs=2"],
    "configs/ippo_tag.yaml": ["algo.num_envs=4", "algo.num_steps=10", "algo.update_epochs=1"],
    "examples/reinforce_cartpole.yaml": ["algo.num_envs=8", "algo.num_steps=16"],
}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _sets(tmp_path: Path, overrides: list[str]) -> list[str]:
    return [arg for o in [*overrides, f"runs_dir={tmp_path}"] for arg in ("--set", o)]


@pytest.mark.parametrize("config", list(SMALL), ids=[Path(c).stem for c in SMALL])
def test_plan_ranks_every_candidate_for_every_algorithm(tmp_path: Path, config: str) -> None:
    code, out, err = _run(["plan", config, "--allow-async", *_sets(tmp_path, SMALL[config])])
    assert code == 0, err
    written = json.loads(next(tmp_path.glob("plan-*/plan.json")).read_text())
    rows = written["rows"]
    feasible = [r for r in rows if r["feasible"]]
    assert feasible and feasible[0]["label"] == written["chosen"]
    assert [r["env_steps_per_s"] for r in feasible] == sorted((r["env_steps_per_s"] for r in feasible), reverse=True)
    assert {r["label"] for r in rows} >= {"local", "multi_learner x2", "single_learner_coarse x2"}
    assert any(r["label"] == "async_single_learner x2" and r["changes_learning"] for r in rows)
    for row in feasible:  # every prediction adds up and has its time split
        assert row["iteration_s"] > 0 and math.isfinite(row["iteration_s"])
        assert row["compute_s"] + row["communication_s"] == pytest.approx(row["iteration_s"], rel=1e-6)
    local = next(r for r in rows if r["label"] == "local")
    assert local["communication_s"] == 0.0  # one process: nothing crosses
    own = written["calibration"]["iteration_s"] + written["constants"]["record_s"]  # and the run loop's record
    assert local["iteration_s"] == pytest.approx(own, rel=1e-6)
    assert out.splitlines()[0].startswith(f"plan for {written['config']}") and " wins: " in out


RECORDED = Path(__file__).parent / "data" / "ppo_cartpole_plan.json"
"""A plan.json of the shipped PPO CartPole config (``msrl plan configs/ppo_cartpole.yaml``), kept
for its calibration: what a plan is ranked from, measured once."""


def test_a_recorded_calibration_ranks_the_same_every_time_and_on_any_cluster(tmp_path: Path) -> None:
    config = load_config("configs/ppo_cartpole.yaml", [f"runs_dir={tmp_path}"])
    calibration = read_calibration(str(RECORDED))
    shape = hypothetical_cluster(3, "1gbit/0.5ms", cores=2)
    first = rank_policies(config, calibration, shape)
    again = rank_policies(config, calibration, shape)
    assert first.to_dict() == again.to_dict() and first.table() == again.table()
    argv = ["plan", "configs/ppo_cartpole.yaml", "--calibration", str(RECORDED), "--hosts", "3"]
    argv += ["--link", "1gbit/0.5ms", "--cpus-per-host", "2", *_sets(tmp_path, [])]
    code, out, err = _run(argv)
    assert code == 0, err
    assert out.splitlines()[:-1] == first.table().splitlines()  # the last line says where it wrote the plan
    slow = rank_policies(config, calibration, hypothetical_cluster(3, "100mbit/2ms", cores=2))
    rates = {r.label: r.prediction.env_steps_per_s for r in first.rows if r.prediction.feasible}
    for row in slow.rows:  # a slower link costs every policy that crosses it, and none gains
        if row.prediction.feasible:
            assert row.prediction.env_steps_per_s <= rates[row.label] * (1 + 1e-9)


def test_policy_auto_trains_under_the_plans_first_row_and_records_the_plan(tmp_path: Path) -> None:
    overrides = [*SMALL["configs/ppo_cartpole.yaml"], "total_env_steps=256", "eval_episodes=0", "policy=auto"]
    stream = io.StringIO()
    with msrl.app.Trainer("configs/ppo_cartpole.yaml", [*overrides, f"runs_dir={tmp_path}"], stream=stream) as trainer:
        while not trainer.done:
            trainer.step()
        run_dir = Path(trainer.run_dir)
    written = json.loads((run_dir / "plan.json").read_text())
    config = load_config("configs/ppo_cartpole.yaml", [*overrides, f"runs_dir={tmp_path}"])
    again = rank_policies(config, read_calibration(str(run_dir / "plan.json")), this_machine())
    assert written["chosen"] == again.best.label  # the plan's first row, from the run's own calibration
    ran = yaml.safe_load((run_dir / "config.yaml").read_text())["policy"]
    assert ran == again.best.spec == written["chosen_policy"]  # what the run directory says ran
    assert not again.best.changes_learning  # async only where the config allows it
    assert f"msrl: policy auto chose {written['chosen']}: predicted " in stream.getvalue()
    assert [json.loads(line)["env_steps"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1] >= 256


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hosts", "2", "--link", "fast"], "unknown link 'fast'; valid forms"),
        (["--link", "1gbit/0.5ms"], "give --hosts N"),
        (["--hosts", "2", "--cpus-per-host", "0"], "--cpus-per-host must be > 0"),
        (["--hosts", "0"], "--hosts must be >= 1"),
        (["--hosts", "2", "--address", "auto"], "not both"),
    ],
)
def test_bad_plan_input_is_one_line_and_writes_nothing(tmp_path: Path, argv: list[str], message: str) -> None:
    code, out, err = _run(["plan", "configs/ppo_cartpole.yaml", *argv, *_sets(tmp_path, [])])
    assert code == 2 and out == ""
    assert err.startswith("msrl: error: ") and message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_calibration_that_is_not_one_or_cannot_finish_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"calibration": {"node_seconds": {"a": -1.0}}}))
    code, _, err = _run(["plan", "configs/ppo_cartpole.yaml", "--calibration", str(bad), *_sets(tmp_path, [])])
    assert code == 2 and "holds no calibration" in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="calibration failed: .* did not finish within 0 s"):
        calibrate_run(load_config("configs/ppo_cartpole.yaml"), budget_s=0.0)
