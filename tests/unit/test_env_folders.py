"""An environment lives in one folder: ``msrl/envs/<name>/`` holds its physics, its kernel
source and its one registration, and nothing else in the project names it.

Checked three ways: every registered environment's pieces and backends come from its own
folder's ``REGISTRATION``; ``fragments`` (which builds and runs kernel sources) names no
environment; and a new environment made by copying one folder, with no other file touched,
is registered and runs on every backend, its kernels included, in agreement with NumPy."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import msrl.envs

REPO = Path(__file__).resolve().parents[2]
KERNEL_BACKENDS = {"cuda", "cuda-emulated", "cpu-kernel"}
"""What ``fragments`` offers every environment whose registration names a kernel source."""


def _folders(kind: type = msrl.envs.EnvRegistration) -> dict[str, Path]:
    """Env id (a family's pattern) -> the folder whose ``__init__`` registers it, for the folders
    whose ``REGISTRATION`` is of ``kind``."""
    folders = {}
    for init in sorted((REPO / "msrl" / "envs").glob("*/__init__.py")):
        module = f"msrl.envs.{init.parent.name}"
        registration = importlib.import_module(module).REGISTRATION
        assert isinstance(registration, (msrl.envs.EnvRegistration, msrl.envs.EnvFamily)), module
        if isinstance(registration, kind):
            folders[getattr(registration, "env_id", None) or registration.pattern] = init.parent
    return folders


def test_every_environment_msrl_builds_in_has_a_folder_and_one_registration():
    folders = _folders()
    assert set(folders) == set(msrl.envs.registrations())
    assert set(folders) <= set(msrl.envs.env_ids())  # beside any a user registered
    assert {"CartPole-v1", "Pendulum-v1", "Tag-v0", "simple_spread_v3"} <= set(folders)


def test_a_family_of_ids_is_one_folder_whose_class_lives_in_it():
    """``ALE/<Game>-v5`` and ``MinAtar/<Game>-v1``: one folder each, the class it builds in that
    folder, and an id of the family answers with the family's backend alone."""
    families = _folders(msrl.envs.EnvFamily)
    assert {family.pattern for family in msrl.envs.families()} == set(families)
    assert {r"ALE/(\w+)-v5", r"MinAtar/(\w+)-v1"} <= set(families)
    for family in msrl.envs.families():
        assert family.env.startswith(f"msrl.envs.{families[family.pattern].name}._")
        assert family.matches(family.example.replace("<Game>", "Breakout"))
        assert msrl.envs.backends(family.example.replace("<Game>", "Breakout")) == [family.backend]


@pytest.mark.parametrize("env_id", sorted(msrl.envs.registrations()))
def test_an_environments_pieces_and_backends_come_from_its_folder(env_id: str):
    registration, folder = msrl.envs.registrations()[env_id], _folders()[env_id]
    package = f"msrl.envs.{folder.name}"
    assert registration.env.startswith(f"{package}._"), registration.env  # its class, in the folder
    cls = registration.env_class()
    assert cls.env_id == env_id and cls.__module__.startswith(package + ".")
    if registration.kernel_source is not None:
        assert registration.kernel_source.parent == folder and registration.kernel_source.is_file()
        assert cls.kernel == registration.kernel == registration.kernel_source.stem
        assert msrl.envs.kernel_sources()[cls.kernel] == registration.kernel_source
    else:
        assert cls.kernel is None
    kernels = KERNEL_BACKENDS if registration.kernel_source is not None else set()
    assert set(msrl.envs.backends(env_id)) == set(registration.backends()) | kernels


def test_fragments_names_no_environment():
    """``fragments`` builds whichever kernel source a registration names: no environment id,
    folder or kernel source appears in its code, kernels or docs."""
    names = set()
    for env_id, registration in msrl.envs.registrations().items():
        names |= {env_id, registration.env.partition(":")[0].rpartition(".")[0]}
        if registration.kernel_source is not None:
            names.add(registration.kernel_source.name)
    found = []
    for path in sorted((REPO / "fragments").rglob("*")):
        if path.suffix in (".py", ".cu", ".cuh", ".h"):
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(REPO)}: {name}" for name in sorted(names) if name in text]
    assert not found, "fragments names environments:\n" + "\n".join(found)


def test_the_package_data_ships_every_kernel_source_and_header():
    """An installed msrl has each environment's kernel source and the shared headers: the
    package-data globs of ``msrl.envs`` match them (and would match a new folder's)."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")

    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["msrl.envs"]
    envs = REPO / "msrl" / "envs"
    shipped = {path for pattern in globs for path in envs.glob(pattern)}
    needed = set(msrl.envs.kernel_sources().values()) | set(msrl.envs.KERNEL_HEADERS.glob("*.cuh"))
    assert needed and needed <= shipped, sorted(map(str, needed - shipped))
    assert {path.name for path in msrl.envs.KERNEL_HEADERS.glob("*.cuh")} >= {"msrl_episodes.cuh", "msrl_rng.cuh"}


def _copy_of_pendulum(root: Path) -> None:
    """A copy of the repository's packages with ``msrl/envs/swing/``, Pendulum's folder under a
    new id and kernel name: the one change an added environment makes."""
    for package in ("msrl", "fragments", "policies", "algorithms", "cluster"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    source, target = root / "msrl" / "envs" / "pendulum", root / "msrl" / "envs" / "swing"
    target.mkdir()
    for path in sorted(source.iterdir()):
        if path.is_file():
            text = path.read_text(encoding="utf-8").replace("Pendulum-v1", "Swing-v0")
            (target / path.name.replace("pendulum", "swing")).write_text(re.sub(r"\bpendulum", "swing", text))


def test_a_new_environment_is_one_new_folder(tmp_path: Path):
    """Copying Pendulum's folder as ``Swing-v0`` (nothing else edited) registers it, with every
    backend, and its kernels build and run on the CPU emulation and natively, float64 equal to
    NumPy bit for bit."""
    root = tmp_path / "tree"
    _copy_of_pendulum(root)
    probe = """
import numpy as np
import torch
import msrl.envs
from msrl.envs.consistency import check_consistency

assert "Swing-v0" in msrl.envs.env_ids(), msrl.envs.env_ids()
assert {"numpy", "torch", "cuda", "cuda-emulated", "cpu-kernel"} <= set(msrl.envs.backends("Swing-v0"))
torques = [np.random.default_rng(t).uniform(-2.5, 2.5, (8, 1)).astype(np.float32) for t in range(220)]
for backend in ("torch", "cuda-emulated", "cpu-kernel"):
    dtype = torch.float64 if backend == "torch" else np.float64
    env = msrl.envs.make("Swing-v0", 8, seed=2, backend=backend, dtype=dtype)
    assert (env.dynamics.name == "kernels") == (backend != "torch"), backend
    exact = {} if backend == "torch" else {"atol": 0.0, "rtol": 0.0, "resync_every": 0}
    report = check_consistency(msrl.envs.make("Swing-v0", 8, seed=1), env, 220, torques, **exact)
    assert report.ok, f"{backend}: {report}"
    assert env.metrics()["episodes"] == 8, backend  # the 200-step limit, through each backend's autoreset
print("ok")
"""
    environment = {**os.environ, "PYTHONPATH": str(root), "MSRL_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
