"""Every config in ``configs/`` is one a user can start from: it loads, its algorithm's settings
pass their own checks, and the README's algorithm table names it beside its algorithm."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msrl.app import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def algorithm_table() -> dict[str, str]:
    """The README's algorithm table: each row's algorithm and its configs cell."""
    rows = {}
    for line in (REPO / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"`[a-z0-9_]+`", cells[0]) and ".yaml" in cells[3]:
            rows[cells[0].strip("`")] = cells[3]
    return rows


def test_the_configs_folder_is_not_empty() -> None:
    assert len(CONFIGS) >= 30


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_a_shipped_config_loads_and_its_settings_validate(path: Path) -> None:
    config = load_config(str(path))
    config.algo.validate()
    assert config.run.name == path.stem  # its runs land in runs/<file name>


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_readme_lists_a_shipped_config_beside_its_algorithm(path: Path) -> None:
    algorithm = load_config(str(path)).run.algorithm
    table = algorithm_table()
    assert algorithm in table, f"the README's algorithm table has no row for {algorithm}"
    assert f"`{path.name}`" in table[algorithm], f"{path.name} is not in the {algorithm} row"
