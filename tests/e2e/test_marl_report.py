"""``python -m benchmarks.marl_learning report RECORDS...``: simple_spread runs are grouped by the rules they
ran under, whether a record's config set them (``env_kwargs``: the shipped config carries the
fork's integrator) or its overrides did (a record without ``env_kwargs``, whose config had mpe2's
rules), and each
group's returns read in the MAPPO paper's units: 6 R - 75 under mpe2's reward, as they are under
the fork's shared reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.marl_learning import report


def _record(seed: int, ret: float, overrides: list[str], env_kwargs: dict | None, algorithm: str = "ippo") -> dict:
    record = {
        "kind": "spread",
        "algorithm": algorithm,
        "seed": seed,
        "env_steps": 32_000,
        "overrides": overrides,
        "greedy_return": ret,
        "greedy_episodes": 4,
        "train_return_last5": ret,
        "curve": [[16_000, ret - 1.0], [32_000, ret]],
        "wall_s": 1.0,
    }
    if env_kwargs is not None:
        record["env_kwargs"] = env_kwargs
    return record


def _rows(out: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_runs_group_by_their_rules_wherever_the_rules_were_set(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    records = [
        _record(1, -10.0, [], None),  # no env_kwargs: the config had mpe2's rules
        _record(2, -12.0, [], None),
        _record(1, -7.0, [], {"integrator": "semi-implicit"}),  # the shipped config's integrator
        _record(2, -8.0, ["algo.env_kwargs.integrator=semi-implicit"], None),  # the same rules, by override
        _record(1, -120.0, [], {"landmark_range": 0.8, "shared_reward": True, "integrator": "semi-implicit"}),
        _record(1, -9.0, ["algo.layer_norm=true"], {"integrator": "semi-implicit"}),
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report([str(path)], str(tmp_path / "figure"))
    rows = _rows(capsys.readouterr().out)
    assert sorted(rows) == [
        "IPPO, mpe2's rules",
        "IPPO, the fork's integrator",
        "IPPO, the fork's integrator algo.layer_norm=true",
        "IPPO, the fork's rules",
    ]
    assert rows["IPPO, mpe2's rules"][0] == "1, 2"
    assert rows["IPPO, the fork's integrator"][0] == "1, 2"
    # the paper's units: 6 R - 75 under mpe2's reward (mean R -7.5: -120 ± 3), as is under the shared one
    assert rows["IPPO, the fork's integrator"][3] == "-120 ± 3"
    assert rows["IPPO, mpe2's rules"][3] == "-141 ± 6"
    assert rows["IPPO, the fork's rules"][3] == "-120 ± 0"
    assert (tmp_path / "figure.png").stat().st_size > 0
