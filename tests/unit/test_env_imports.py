"""``msrl.envs`` imports itself in one direction only.

Every import statement of every module in ``msrl/envs`` and its environments'
folders counts, wherever it is: at the top, inside a function, or under ``if
TYPE_CHECKING``.  An import of a module inside the package is an edge; the graph
must have no cycle.  (Each environment's NumPy and torch physics both import the
``_base`` module of its folder and neither imports the other; ``_kernels`` knows
environments through a protocol.)"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import msrl.envs

PACKAGE = "msrl.envs"
ROOT = Path(msrl.envs.__file__).parent


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _imported(node: ast.AST, module: str, modules: dict[str, Path]) -> list[str]:
    """The modules of the package that one import statement imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: from the module's package
        package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    # ``from msrl.envs import _gymnasium`` imports the submodule; ``from msrl.envs import make`` the package
    found = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in modules:
            found.append(submodule)
        elif base in modules:
            found.append(base)
    return found


def import_graph(modules: dict[str, Path] | None = None) -> nx.DiGraph:
    modules = _modules() if modules is None else modules
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, module, modules):
                if target != module:
                    graph.add_edge(module, target)
    return graph


def test_msrl_envs_imports_form_no_cycle():
    graph = import_graph()
    cycles = sorted(" -> ".join([*cycle, cycle[0]]) for cycle in nx.simple_cycles(graph))
    assert not cycles, "import cycles inside msrl/envs:\n" + "\n".join(cycles)


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The reader is not blind: function-level, TYPE_CHECKING, relative and package-level
    imports are all edges, so the check above could fail."""
    (tmp_path / "__init__.py").write_text("from msrl.envs._b import B\n")
    (tmp_path / "_b.py").write_text("def f():\n    from msrl.envs import _c\n")
    (tmp_path / "_c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._d import D\n")
    (tmp_path / "_d.py").write_text("import msrl.envs._b\n")
    modules = {_module_name(path, tmp_path): path for path in tmp_path.glob("*.py")}
    graph = import_graph(modules)
    assert set(graph.edges) == {
        ("msrl.envs", "msrl.envs._b"),
        ("msrl.envs._b", "msrl.envs._c"),
        ("msrl.envs._c", "msrl.envs._d"),
        ("msrl.envs._d", "msrl.envs._b"),
    }
    assert list(nx.simple_cycles(graph))


@pytest.mark.parametrize("twin", ["cartpole", "pendulum", "simple_spread", "tag"])
def test_each_env_and_its_torch_twin_share_a_base_and_import_not_each_other(twin):
    graph = import_graph()
    numpy_module, torch_module, base = (f"{PACKAGE}.{twin}.{m}" for m in ("_numpy", "_torch", "_base"))
    assert graph.has_edge(numpy_module, base) and graph.has_edge(torch_module, base)
    assert not nx.has_path(graph, torch_module, numpy_module)
