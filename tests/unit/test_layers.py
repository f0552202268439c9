"""Imports point down only, and no package reaches into another's private modules.

Every module of msrl's packages is read as source (AST), every import counted,
at module level or inside a function, and so is every ``"module:Name"`` string
(the form msrl's registries import lazily).  The layers, bottom to top
(DESIGN.md):

    0  msrl.core                       the public API an algorithm is written against
    1  msrl.rl, msrl.envs              building blocks and environments, on the core
    2  msrl.data                       recorded datasets and the replay that reads them
    3  policies, algorithms            side by side: neither imports the other
    4  fragments                       partitioner, programs, executors
    5  cluster                         everything Ray
    6  msrl.app                        run loop, checkpoints, evaluation, CLI
    7  msrl (the package's __init__)   the facade: the core's names and the application's
    8  testbed                         hosts as network namespaces, for tests, benchmarks and
                                       users trying many hosts on one machine: it may use
                                       cluster's and msrl's public names, and no production
                                       package (layers 0-6) imports it

A module may import its own unit freely; another unit only if it sits on a
lower layer, and then only public modules (no path component starting with
``_``).  Below ``cluster`` nothing imports Ray; below ``fragments`` nothing
imports pycuda.  Tests and benchmarks, outside every package, may import any
public name and no private module.  The checker is also run on a copy of the
tree with a planted upward import and a planted private one, to show it fails.
"""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("msrl", "fragments", "policies", "algorithms", "cluster", "testbed")
UNITS = {  # unit -> layer; the longest matching prefix names a module's unit
    "msrl.core": 0,
    "msrl.rl": 1,
    "msrl.envs": 1,
    "msrl.data": 2,
    "policies": 3,
    "algorithms": 3,
    "fragments": 4,
    "cluster": 5,
    "msrl.app": 6,
    "msrl": 7,
    "testbed": 8,
}
FORBIDDEN_THIRD_PARTY = {"ray": 5, "pycuda": 4}
"""A library and the lowest layer that may import it."""
REGISTRY_STRING = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*):[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    how: str


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("__init__", "__main__") and len(parts) > 1:
        parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts)


def unit_of(module: str) -> str | None:
    matches = [unit for unit in UNITS if module == unit or module.startswith(unit + ".")]
    return max(matches, key=len) if matches else None


def is_private(module: str, unit: str) -> bool:
    rest = module[len(unit) :].lstrip(".")
    return any(part.startswith("_") and part not in ("__init__", "__main__") for part in rest.split(".") if part)


def resolve(root: Path, module: str, name: str) -> str:
    """``from module import name``: the submodule if ``name`` is one, else the module."""
    candidate = root.joinpath(*f"{module}.{name}".split("."))
    return (
        f"{module}.{name}" if candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists() else module
    )


def imports_of(root: Path, path: Path) -> list[Import]:
    importer = module_name(root, path)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend(Import(importer, alias.name, node.lineno, "import") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importer's package upwards
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.extend(Import(importer, resolve(root, base, alias.name), node.lineno, "from") for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = REGISTRY_STRING.match(node.value)
            if match and match.group(1).split(".")[0] in PACKAGES:
                found.append(Import(importer, match.group(1), node.lineno, "registry string"))
    return found


def violations(root: Path) -> list[str]:
    """Every import in ``root`` that breaks the layering or privacy rules, one line each."""
    problems: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for imp in imports_of(root, path):
                problems.extend(_check_package_import(imp, path.relative_to(root)))
    for outside in ("tests", "benchmarks"):
        for path in sorted((root / outside).rglob("*.py")):
            for imp in imports_of(root, path):
                unit = unit_of(imp.target)
                if unit is not None and imp.target.split(".")[0] in PACKAGES and is_private(imp.target, unit):
                    problems.append(f"{path.relative_to(root)}:{imp.line}: imports private module {imp.target}")
    return list(dict.fromkeys(problems))  # one line per offending import, however many names it takes


def _check_package_import(imp: Import, where: Path) -> list[str]:
    source, layer = unit_of(imp.importer), UNITS[unit_of(imp.importer)]
    top = imp.target.split(".")[0]
    if top in FORBIDDEN_THIRD_PARTY and layer < FORBIDDEN_THIRD_PARTY[top]:
        return [f"{where}:{imp.line}: {source} imports {top}, which only layers >= {FORBIDDEN_THIRD_PARTY[top]} may"]
    target = unit_of(imp.target) if top in PACKAGES else None
    if target is None or target == source:
        return []
    if UNITS[target] >= layer:
        return [
            f"{where}:{imp.line}: {imp.how} of {imp.target} from {imp.importer}: {source} (layer {layer}) must not "
            f"import {target} (layer {UNITS[target]})"
        ]
    if is_private(imp.target, target):
        return [
            f"{where}:{imp.line}: {imp.importer} imports private module {imp.target} of {target}; use its public names"
        ]
    return []


def test_imports_point_down_and_stay_public() -> None:
    problems = violations(REPO)
    assert not problems, "\n".join(problems)


def test_every_package_module_belongs_to_a_layer() -> None:
    modules = [module_name(REPO, p) for package in PACKAGES for p in (REPO / package).rglob("*.py")]
    assert modules and all(unit_of(m) is not None for m in modules)
    assert (
        unit_of("msrl.core._tracing") == "msrl.core" and unit_of("msrl") == "msrl" and unit_of("msrl.app") == "msrl.app"
    )


def test_algorithms_never_mention_replicas() -> None:
    """An algorithm states per-run quantities and seeds; how they are shared among the replicas
    of a fragment is msrl's business (``msrl.split``, ``RunInfo.data_seed``)."""
    mentions = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted((REPO / "algorithms").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"replica", line, re.IGNORECASE)
    ]
    assert not mentions, "\n".join(mentions)


def _copy_tree(tmp_path: Path) -> Path:
    for name in (*PACKAGES, "tests", "benchmarks"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.cubin"))
    return tmp_path


def _planted(root: Path, files: dict[str, str]) -> list[str]:
    """The violations that planting ``files`` (path -> source) adds to the tree at ``root``."""
    before = set(violations(root))
    for relative, source in files.items():
        (root / relative).write_text(source)
    return [line for line in violations(root) if line not in before]


def test_a_planted_upward_import_inside_a_function_fails(tmp_path: Path) -> None:
    found = _planted(
        _copy_tree(tmp_path), {"msrl/core/_planted.py": "def later():\n    import cluster\n    return cluster\n"}
    )
    assert found == [
        "msrl/core/_planted.py:2: import of cluster from msrl.core._planted: msrl.core "
        "(layer 0) must not import cluster (layer 5)"
    ]


def test_planted_private_imports_and_registry_strings_fail(tmp_path: Path) -> None:
    lines = _planted(
        _copy_tree(tmp_path),
        {
            "cluster/_planted.py": "from fragments._program import Recv\n",
            "msrl/envs/_planted.py": 'BACKENDS = {"cuda": "fragments.cuda:CartPoleCuda"}\n',
            "algorithms/_planted.py": "import policies\nimport ray\n",
            "tests/test_planted.py": "from msrl.core._graph import Node\n",
        },
    )
    found = "\n".join(lines)
    assert "cluster/_planted.py:1: cluster._planted imports private module fragments._program" in found
    assert "msrl/envs/_planted.py:1: registry string of fragments.cuda" in found
    assert "algorithms/_planted.py:1: import of policies from algorithms._planted" in found
    assert "algorithms/_planted.py:2: algorithms imports ray" in found
    assert "tests/test_planted.py:1: imports private module msrl.core._graph" in found
    assert len(lines) == 5


def test_no_production_package_imports_the_testbed_and_the_testbed_uses_public_names(tmp_path: Path) -> None:
    lines = _planted(
        _copy_tree(tmp_path),
        {
            "cluster/_planted.py": "def later():\n    import testbed\n    return testbed\n",
            "msrl/app/_planted.py": "from testbed import Testbed\n",
            "testbed/_planted.py": "from cluster._connect import probe\n",
            "testbed/_allowed.py": "import msrl\nfrom cluster import connect\nfrom msrl.app import load_config\n",
            "tests/test_planted.py": "from testbed._netns import kill_all\n",
        },
    )
    found = "\n".join(lines)
    assert "cluster/_planted.py:2: import of testbed from cluster._planted: cluster (layer 5) must not" in found
    assert "msrl/app/_planted.py:1: from of testbed from msrl.app._planted: msrl.app (layer 6) must not" in found
    assert "testbed/_planted.py:1: testbed._planted imports private module cluster._connect" in found
    assert "tests/test_planted.py:1: imports private module testbed._netns" in found
    assert len(lines) == 4, found  # testbed/_allowed.py: public names of the layers below, no violation
