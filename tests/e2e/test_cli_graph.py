"""``msrl graph`` end to end through ``msrl.app.main`` (it traces and partitions, and starts
nothing): the traced nodes printed, the fragmented graph drawn as DOT and PNG, the default file
prefix, and an output directory that does not exist as one error line with nothing written."""

from __future__ import annotations

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
        # not the default --out: that writes into the current directory (test_graph_default_prefix...)
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


def test_graph_default_prefix_is_the_policy_name(tmp_path, monkeypatch, capsys):
    # In process (plan() starts nothing): the files land in the current directory.
    monkeypatch.chdir(tmp_path)
    config = REPO / CONFIG
    assert main(["graph", str(config), "--set", "algo.num_envs=2", "--set", "algo.num_steps=4"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "wrote fdg_local.dot and fdg_local.png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fdg_local.dot", "fdg_local.png"]
    policy = (
        "policy={fragments: [{name: rollout, components: [env, actor, buffer], replicas: 2}, "
        "{name: learn, components: [learner]}]}"
    )
    assert main(["graph", str(config), "--set", policy, "--set", "algo.num_envs=2", "--set", "algo.num_steps=4"]) == 0
    assert "gather, per_iteration" in (tmp_path / "fdg_custom.dot").read_text()
