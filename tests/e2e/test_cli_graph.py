"""``msrl graph`` end to end through ``msrl.app.main`` (it traces and partitions, and starts
nothing): the traced nodes printed, the fragmented graph drawn as DOT and PNG, the default file
prefix (under the config's runs_dir), and an output directory that does not exist as one error
line with nothing written."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from cli_helpers import CONFIG, REPO, assert_one_error_line, explain, in_process

from msrl.app import main

SHIPPED = yaml.safe_load((REPO / CONFIG).read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_graph")
    (root / "drawn").mkdir()
    config = str(REPO / CONFIG)
    return {
        "root": root,
        # not the default --out: that writes under the config's runs_dir (test_graph_default_prefix...)
        "graph": in_process("graph", config, "--out", str(root / "drawn" / "fdg")),
        "graph to a missing directory": in_process("graph", config, "--out", str(root / "no_such_dir" / "fdg")),
    }


def test_graph_prints_the_nodes(runs):
    result = runs["graph"]
    assert result.returncode == 0, explain(result)
    for name in (
        "env.observe",
        "actor.act",
        "env.step",
        "buffer.insert",
        "actor.value",
        "buffer.drain",
        "learner.learn",
        "learner.get_weights",
        "actor.set_weights",
        "output",
    ):
        assert f"%{name} = " in result.stdout, name
    steps = SHIPPED["algo"]["num_steps"]
    loop = f"loop loop0: {steps} iterations of actor.act, env.step, buffer.insert  # algorithms/ppo.py:"
    assert loop in result.stdout
    assert (
        "FDG for policy 'local'" in result.stdout
        and "fragment local: 1 x [env, actor, buffer, learner]" in result.stdout
    )


def test_graph_writes_dot_and_png(runs):
    result, drawn = runs["graph"], runs["root"] / "drawn"
    assert result.returncode == 0, explain(result)
    assert sorted(p.name for p in drawn.iterdir()) == ["fdg.dot", "fdg.png"]
    assert result.stdout.strip().splitlines()[-1] == f"wrote {drawn / 'fdg'}.dot and {drawn / 'fdg'}.png"
    dot = (drawn / "fdg.dot").read_text()
    assert dot.startswith('digraph "fdg_local" {') and 'subgraph "cluster_local" {' in dot
    assert '"learner.learn" [label="learner.learn"' in dot and '"env.step" [label="env.step [loop]"' in dot
    png = (drawn / "fdg.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 20_000


def test_graph_to_a_missing_directory_is_one_error_line(runs):
    missing = runs["root"] / "no_such_dir"
    assert_one_error_line(
        runs["graph to a missing directory"], ["--out", "output directory", str(missing), "does not exist"]
    )
    assert not missing.exists()


def test_graph_default_prefix_is_the_policy_name_under_the_runs_dir(tmp_path, monkeypatch, capsys):
    # In process (plan() starts nothing): the files land under the config's runs_dir, which the
    # repository's .gitignore covers (runs/), and nothing in the current directory.
    monkeypatch.chdir(tmp_path)
    config = REPO / CONFIG
    small = ["--set", "algo.num_envs=2", "--set", "algo.num_steps=4"]
    drawn = tmp_path / "runs" / "graph-ppo_cartpole"
    assert main(["graph", str(config), *small]) == 0
    prefix = drawn.relative_to(tmp_path) / "fdg_local"
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {prefix}.dot and {prefix}.png"
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    assert sorted(p.name for p in drawn.iterdir()) == ["fdg_local.dot", "fdg_local.png"]
    policy = (
        "policy={fragments: [{name: rollout, components: [env, actor, buffer], replicas: 2}, "
        "{name: learn, components: [learner]}]}"
    )
    assert main(["graph", str(config), "--set", policy, *small]) == 0
    assert "gather, per_iteration" in (drawn / "fdg_custom.dot").read_text()
    assert main(["graph", str(config), "--set", f"runs_dir={tmp_path / 'elsewhere'}", *small]) == 0
    assert (tmp_path / "elsewhere" / "graph-ppo_cartpole" / "fdg_local.png").exists()


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_default_outputs_of_graph_and_plot_are_ignored_by_git():
    """With the shipped config's runs_dir, what graph and plot write by default stays out of git."""
    for path in ("runs/graph-ppo_cartpole/fdg_local.dot", "runs/graph-ppo_cartpole/fdg_local.png"):
        assert subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=REPO).returncode == 0, path
    assert SHIPPED.get("runs_dir", "runs") == "runs"
    plot = "runs/ppo_cartpole/learning_curves.png"
    assert subprocess.run(["git", "check-ignore", "--no-index", "-q", plot], cwd=REPO).returncode == 0
