"""``msrl compare`` and ``msrl plot`` end to end: every file a comparison promises, each table row
recomputed from its run's own metrics, sweeps, an interrupted comparison that keeps its finished
rows and completes on a second run, and bad input as one line with exit status 2."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from msrl.app import main, read_metrics

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")
TINY = ["--budget", "4096", "--set", "eval_episodes=2", "--set", "checkpoint_every=0"]
PNGS = ["return_vs_time.png", "return_vs_steps.png", "time_split.png"]


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def expected_row(run_dir: str) -> dict[str, float]:
    """What a table row must say, worked out here from the run's metrics.jsonl and eval.json."""
    records = read_metrics(run_dir)
    steady = records[1:] if len(records) >= 3 else records
    first = len(records) - len(steady)
    steps = records[-1]["env_steps"] - (records[first - 1]["env_steps"] if first else 0)
    seconds = sum(r["wall_time"] for r in steady)
    evaluation = json.loads((Path(run_dir) / "eval.json").read_text())
    return {
        "env_steps_per_s": steps / seconds,
        "seconds_per_iteration": seconds / len(steady),
        "learn_s": sum(r["time_learn"] for r in steady) / len(steady),
        "env_s": sum(r["time_env"] for r in steady) / len(steady),
        "final_return_mean": evaluation["mean"],
    }


@pytest.mark.slow  # about 35 s (three policies on Ray); the sweep below runs compare end to end in the default suite
def test_compare_writes_the_table_and_plots_and_each_row_is_its_runs_own(tmp_path: Path, monkeypatch) -> None:
    """docs/guide.md's comparison with a tiny budget: its algorithm (examples/reinforce.py) under local,
    single_learner_coarse and multi_learner.  Every promised file, each row recomputed from its run's
    metrics, and the guide's reading: the two Ray presets learn identically, local on other data."""
    monkeypatch.chdir(REPO)  # the config names examples.reinforce:Reinforce, importable from here
    monkeypatch.syspath_prepend(str(REPO))
    code, out, err = run_cli(
        [
            "compare",
            "examples/reinforce_cartpole.yaml",
            "--policies",
            "local,single_learner_coarse,multi_learner",
            "--budget",
            "1536",
            "--set",
            "algo.num_steps=32",
            "--set",
            "eval_episodes=2",
            "--set",
            "checkpoint_every=0",
            "--set",
            f"runs_dir={tmp_path}",
            "--name",
            "three",
        ]
    )
    assert code == 0, err
    root = tmp_path / "compare-three"
    for name in ["results.jsonl", "summary.csv", "summary.md", "summary_fragments.csv", *PNGS]:
        assert (root / name).is_file(), name
    for name in PNGS:
        image = matplotlib.image.imread(root / name)
        assert image.shape[0] > 300 and image.shape[1] > 400 and image.std() > 0.05, name  # drawn, not blank
    rows = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
    table = list(csv.DictReader((root / "summary.csv").open()))
    assert [r["combination"] for r in table] == ["local", "single_learner_coarse", "multi_learner"]
    markdown = (root / "summary.md").read_text()
    for row, line in zip(rows, table):
        row["run_dir"] = str(root / row["run_dir"])  # kept relative to the comparison's directory
        assert row["label"] == line["combination"]
        config = yaml.safe_load((Path(row["run_dir"]) / "config.yaml").read_text())
        assert config["policy"] == {"preset": row["policy"]} and config["total_env_steps"] == 1536
        assert [r["env_steps"] for r in read_metrics(row["run_dir"])] == [512, 1024, 1536]
        for key, value in expected_row(row["run_dir"]).items():
            assert math.isclose(float(line[key]), value, rel_tol=1e-9), (line["combination"], key)
        assert f"| {line['combination']} | 1 | {float(line['env_steps_per_s']):,.0f} |" in markdown
        assert any(name.startswith("events.out.tfevents") for name in os.listdir(row["run_dir"]))
    assert [(r["resources"], r["replicas"]) for r in table] == [("CPU 1", "1"), ("CPU 3", "3"), ("CPU 2", "2")]
    assert "| combination |" in out and "[3/3] multi_learner seed=1" in err  # table on stdout, progress on stderr
    fragments = list(csv.DictReader((root / "summary_fragments.csv").open()))  # Ray policies: split per fragment
    assert [(f["combination"], f["fragment"]) for f in fragments] == [  # multi_learner has one fragment
        ("single_learner_coarse", "learner"),
        ("single_learner_coarse", "rollout"),
    ]
    steady = read_metrics(rows[1]["run_dir"])[1:]
    assert math.isclose(float(fragments[1]["env_s"]), sum(r["time_env/rollout"] for r in steady) / len(steady))
    assert float(fragments[0]["env_s"]) == 0.0 < float(fragments[0]["learn_s"])  # the learner steps no env
    assert "| single_learner_coarse | rollout |" in markdown
    curves = {r["label"]: [m["episode_return"] for m in read_metrics(r["run_dir"])] for r in rows}
    assert curves["single_learner_coarse"] == curves["multi_learner"] != curves["local"]
    assert math.isclose(float(table[1]["final_return_mean"]), float(table[2]["final_return_mean"]))


def test_the_guides_algorithm_is_as_short_as_it_says() -> None:
    lines = len((REPO / "examples" / "reinforce.py").read_text().splitlines())
    stated = re.search(r"in (\d+) lines", (REPO / "docs" / "guide.md").read_text())
    assert lines < 60 and stated is not None and int(stated.group(1)) == lines


def test_a_sweep_is_a_grid_with_a_run_directory_per_point(tmp_path: Path) -> None:
    """Each point of the grid its own run; and the preset the config names (``local`` with two
    CPUs here, as ``configs/ppo_atari.yaml`` gives it) runs with the config's settings for it."""
    config = yaml.safe_load(Path(CONFIG).read_text())
    config["policy"] = {"preset": "local", "cpus": 2}
    (tmp_path / "two_cpus.yaml").write_text(yaml.safe_dump(config))
    code, _, err = run_cli(
        [
            "compare",
            str(tmp_path / "two_cpus.yaml"),
            "--policies",
            "local",
            *TINY,
            "--seeds",
            "2",
            "--set",
            f"runs_dir={tmp_path}",
            "--set",
            "algo.learning_rate=1e-3,3e-3",
            "--name",
            "sweep",
        ]
    )
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "compare-sweep" / "results.jsonl").read_text().splitlines()]
    assert [(r["sweep"], r["seed"]) for r in rows] == [
        ({"algo.learning_rate": "1e-3"}, 1),
        ({"algo.learning_rate": "1e-3"}, 2),
        ({"algo.learning_rate": "3e-3"}, 1),
        ({"algo.learning_rate": "3e-3"}, 2),
    ]
    for row in rows:
        config = yaml.safe_load((tmp_path / "compare-sweep" / row["run_dir"] / "config.yaml").read_text())
        assert float(config["algo"]["learning_rate"]) == float(row["sweep"]["algo.learning_rate"])
        assert config["seed"] == row["seed"]
        assert config["policy"] == {"preset": "local", "cpus": 2}
    table = list(csv.DictReader((tmp_path / "compare-sweep" / "summary.csv").open()))
    assert [(r["combination"], r["seeds"]) for r in table] == [
        ("local algo.learning_rate=1e-3", "2"),
        ("local algo.learning_rate=3e-3", "2"),
    ]


def test_predict_puts_the_cost_models_prediction_beside_each_measured_row(tmp_path: Path) -> None:
    """``--predict``: the calibration of the config (what ``msrl plan`` measures) predicts each row;
    the table shows it beside the measurement with its error, worked out from the two."""
    argv = ["compare", CONFIG, "--policies", "local", *TINY, "--set", f"runs_dir={tmp_path}", "--predict"]
    code, out, err = run_cli([*argv, "--name", "predicted"])
    assert code == 0, err
    assert "calibrating" in err and "predicted env steps/s" in out and "predicted to dominate" in out
    (row,) = list(csv.DictReader((tmp_path / "compare-predicted" / "summary.csv").open()))
    predicted, measured = float(row["predicted_seconds_per_iteration"]), float(row["seconds_per_iteration"])
    assert predicted > 0 and float(row["prediction_error"]) == pytest.approx(predicted / measured - 1)
    assert row["predicted_dominant"] == "local's compute"
    assert f"{predicted / measured - 1:+.0%}" in (tmp_path / "compare-predicted" / "summary.md").read_text()


def _ctrl_c_as_at_a_terminal() -> None:
    """The child's SIGINT as a terminal's Ctrl-C finds it. A shell starts background jobs (``pytest
    ... &``) with SIGINT ignored, and the child would inherit that and never see the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow  # about 20 s (three runs in subprocesses): the suite's 6-minute budget
def test_an_interrupted_compare_keeps_its_rows_and_a_rerun_completes_the_rest(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) once the first run's row is written, while the second runs: exit 130, one row
    kept, its table written; the same command again skips that run and completes the other."""
    command = [
        sys.executable,
        "-m",
        "msrl",
        "compare",
        CONFIG,
        "--policies",
        "local",
        "--budget",
        "16384",
        "--set",
        "eval_episodes=2",
        "--set",
        f"runs_dir={tmp_path}",
        "--name",
        "cut",
        "--set",
        "algo.learning_rate=2.5e-3,1e-3",
    ]
    results = tmp_path / "compare-cut" / "results.jsonl"
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    deadline = time.monotonic() + 180
    while not (results.exists() and results.read_text().count("\n") >= 1):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    first = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["sweep"] for r in first] == [{"algo.learning_rate": "2.5e-3"}]
    assert len(list(csv.DictReader((tmp_path / "compare-cut" / "summary.csv").open()))) == 1
    kept = (tmp_path / "compare-cut" / first[0]["run_dir"] / "metrics.jsonl").read_text()

    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr
    assert "seed=1: done already, skipped" in again.stderr
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["sweep"]["algo.learning_rate"] for r in rows] == ["2.5e-3", "1e-3"]
    assert (
        tmp_path / "compare-cut" / first[0]["run_dir"] / "metrics.jsonl"
    ).read_text() == kept  # the finished run was not redone
    assert len(list(csv.DictReader((tmp_path / "compare-cut" / "summary.csv").open()))) == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policies", "local,nonsense"], "unknown policy 'nonsense' in --policies; valid choices:"),
        (["--policies", "local", "--placements", "NEAR"], "unknown placement 'NEAR'; valid choices: PACK"),
        (["--policies", "local", "--set", "policy=multi_learner"], "use --policies"),
        (["--policies", "local", "--set", "algo.learning_rate=1e-3,,2e-3"], "a sweep needs distinct, non-empty values"),
        (["--policies", "local", "--seeds", "0"], "--seeds must be >= 1"),
        (["--policies", "local", "--target", "nan"], "--target must be a finite return"),
        (["--policies", "local", "--set", "algo.no_such_key=1,2"], "unknown config key 'algo.no_such_key'"),
    ],
)
def test_bad_compare_input_is_one_line_and_writes_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    code, out, err = run_cli(["compare", CONFIG, *args, "--set", f"runs_dir={tmp_path}"])
    assert code == 2 and err.startswith("msrl: error: ") and err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_plot_draws_finished_runs_and_rejects_what_is_not_a_run(tmp_path: Path) -> None:
    runs = []
    for seed in (1, 2):
        code, _, err = run_cli(
            [
                "train",
                CONFIG,
                "--set",
                f"runs_dir={tmp_path}",
                "--set",
                f"seed={seed}",
                "--set",
                f"name=s{seed}",
                "--set",
                "total_env_steps=4096",
                "--set",
                "eval_episodes=0",
                "--set",
                "progress=false",
            ]
        )
        assert code == 0, err
        runs.append(str(tmp_path / f"s{seed}"))
    for x in ("steps", "time"):
        out_png = tmp_path / f"curves_{x}.png"
        code, out, err = run_cli(["plot", *runs, "--x", x, "--out", str(out_png)])
        assert code == 0 and out.strip() == f"wrote {out_png}", err
        assert matplotlib.image.imread(out_png).std() > 0.05
    for args, name in (([], "learning_curves.png"), (["--x", "time"], "learning_curves_vs_time.png")):
        code, out, err = run_cli(["plot", *runs, *args])  # beside the first run's files without --out
        assert code == 0 and out.strip() == f"wrote {Path(runs[0]) / name}", err
        assert matplotlib.image.imread(Path(runs[0]) / name).std() > 0.05
    code, _, err = run_cli(["plot", str(tmp_path / "nothing")])
    assert code == 2 and "is not a run directory" in err
    code, _, err = run_cli(["plot", runs[0], "--metric", "reward_of_doom", "--out", str(tmp_path / "x.png")])
    assert code == 2 and "metric 'reward_of_doom' is not in" in err and "episode_return" in err
    code, _, err = run_cli(["plot", runs[0], "--x", "episodes"])
    assert code == 2 and "invalid choice: 'episodes'" in err
