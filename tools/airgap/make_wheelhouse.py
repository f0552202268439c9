#!/usr/bin/env python3
"""Make a wheelhouse for installing msrl on a machine with no package registry.

Run this on a machine that reaches a package index (pip's own configuration is honoured), with the
same Python minor version and platform as the air-gapped machine, or name them with
``--python-version`` and ``--platform``.  The folder it writes holds:

* the msrl wheel, built from this checkout (``pip wheel --no-deps``);
* every dependency of ``msrl[EXTRAS]`` as a wheel (``pip download --only-binary=:all:``), with the
  pins of the project's ``constraints.txt`` (torch's pin can be replaced with ``--torch``, and a
  CUDA build of torch taken from ``--torch-index``);
* for the ``cuda`` extra: pycuda's source distribution, since no prebuilt pycuda wheel matches every
  CUDA, plus the wheels that building and running it need;
* ``install_offline.py`` (the installer to run on the air-gapped machine), ``wheelhouse.json`` (what
  was asked for), and ``SHA256SUMS``, one ``sha256  file`` line per file (``sha256sum -c`` reads it).

Example (see docs/airgapped-install.md)::

    python tools/airgap/make_wheelhouse.py wheelhouse --extras cuda \\
        --torch-index https://download.pytorch.org/whl/cu126 --torch "torch==2.13.0+cu126"

Only the Python standard library is used, so any Python with pip runs it.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path

# The installer travels alone inside the wheelhouse and reads these names: one copy of them, there.
# (SOURCE_EXTRA: the extra whose packages are built from source on the target machine.)
from install_offline import INFO, MANIFEST, SOURCE_EXTRA

PROG = "make_wheelhouse"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
INSTALLER = "install_offline.py"
TOP_LEVEL_SKIP = {"build", "dist", "runs"}  # a checkout's outputs, never part of the wheel
MANYLINUX_ALIASES = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}  # glibc 2.x minor -> PEP 599 name
PYCUDA_BUILD_REQUIRES = ["setuptools", "wheel", "numpy>=1.24"]  # pycuda's pyproject, used without tomllib


class UsageError(Exception):
    """Bad input: reported as one ``make_wheelhouse: error: ...`` line, exit code 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the wheelhouse folder to write (absent or empty)")
    p.add_argument("--extras", default="", help="comma-separated msrl extras to include, e.g. cuda,multiagent")
    p.add_argument("--python-version", help="target Python as MAJOR.MINOR (default: this interpreter's)")
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        help="target platform tag, e.g. manylinux_2_28_x86_64 for glibc 2.28 (older manylinux tags are included; "
        "repeatable; default: this machine's)",
    )
    p.add_argument("--torch", help='torch requirement replacing the pin in constraints.txt, e.g. "torch==2.13.0+cu126"')
    p.add_argument("--torch-index", help="an extra index for torch, e.g. https://download.pytorch.org/whl/cu126")
    p.add_argument("--constraints", type=Path, help="pip constraints file (default: the project's constraints.txt)")
    p.add_argument("--project", type=Path, default=REPO, help="the msrl checkout to build (default: this one)")
    p.add_argument(
        "--no-deps",
        action="store_true",
        help="only msrl's wheel: no dependencies, no pycuda source (for checking these tools quickly)",
    )
    p.add_argument(
        "--no-build-isolation",
        action="store_true",
        help="build msrl's wheel with this interpreter's setuptools instead of a fresh build environment",
    )
    return p.parse_args(argv)


def pip(*args: str) -> None:
    """Run this interpreter's pip; a failure stops the script with pip's own messages above it."""
    cmd = [sys.executable, "-m", "pip", *args]
    print("+ " + " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit(f"{PROG}: pip failed (its output is above): {' '.join(args[:1])}")


def clean_copy(project: Path, dest: Path) -> Path:
    """The checkout without version control, venvs, caches and build leftovers.  setuptools builds in
    the source tree, and a stale ``build/`` there would carry modules deleted since into the wheel."""

    def skip(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == project
        return {
            n
            for n in names
            if n.startswith(".") or n == "__pycache__" or n.endswith(".egg-info") or (top and n in TOP_LEVEL_SKIP)
        }

    shutil.copytree(project, dest, ignore=skip)
    return dest


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def extra_requirements(meta: email.message.Message, extra: str) -> list[str]:
    """The Requires-Dist entries that only ``extra`` brings (their marker names it)."""
    wanted = re.compile(r"""extra\s*==\s*['"]""" + re.escape(extra) + r"""['"]""")
    return [r.split(";")[0].strip() for r in meta.get_all("Requires-Dist") or [] if wanted.search(r)]


def sdist_requirements(sdist: Path) -> list[str]:
    """A source distribution's run-time requirements (PKG-INFO) and the ones its build needs."""
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/")[0]
        pkg_info = tf.extractfile(f"{top}/PKG-INFO")
        meta = email.parser.Parser().parsestr(pkg_info.read().decode()) if pkg_info else None
        build = list(PYCUDA_BUILD_REQUIRES)
        try:
            import tomllib

            pyproject = tf.extractfile(f"{top}/pyproject.toml")
            if pyproject is not None:
                build = tomllib.loads(pyproject.read().decode())["build-system"]["requires"]
        except (ImportError, KeyError):
            pass
    # markers stay (pip evaluates them), except those of the package's own extras, which are left out
    run = [r.strip() for r in (meta.get_all("Requires-Dist") if meta else None) or [] if "extra" not in r]
    return run + build


def constraints_file(args: argparse.Namespace, tmp: Path) -> Path | None:
    """The constraints to honour; with ``--torch``, a copy without its torch line."""
    path = args.constraints or (args.project / "constraints.txt")
    if not path.is_file():
        if args.constraints:
            raise UsageError(f"constraints file not found: {path}")
        return None
    if not args.torch:
        return path
    kept = [ln for ln in path.read_text().splitlines() if not re.match(r"\s*torch\s*([=<>!~;\[]|$)", ln)]
    copy = tmp / "constraints.txt"
    copy.write_text("\n".join(kept) + "\n")
    return copy


def platform_tags(tag: str) -> list[str]:
    """A manylinux tag and every older one: pip takes a named platform literally, so a wheel tagged
    only ``manylinux2014_x86_64`` (Ray's) would not match ``manylinux_2_28_x86_64`` on its own."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag) or re.fullmatch(r"(manylinux\d{4}|manylinux1)_(\w+)", tag)
    if m is None:
        return [tag]
    aliases = {v: k for k, v in MANYLINUX_ALIASES.items()}
    glibc_minor = int(m.group(1)) if m.group(1).isdigit() else aliases[m.group(1)]
    tags = []
    for minor in range(glibc_minor, 4, -1):
        tags.append(f"manylinux_2_{minor}_{m.group(2)}")
        if minor in MANYLINUX_ALIASES:
            tags.append(f"{MANYLINUX_ALIASES[minor]}_{m.group(2)}")
    return tags


def target_options(args: argparse.Namespace) -> list[str]:
    opts: list[str] = []
    if args.python_version:
        if not re.fullmatch(r"3\.\d{1,2}", args.python_version):
            raise UsageError(f"--python-version must be MAJOR.MINOR such as 3.11, not {args.python_version!r}")
        opts += ["--python-version", args.python_version, "--implementation", "cp"]
    for given in args.platform:
        for tag in platform_tags(given):
            if tag not in opts:
                opts += ["--platform", tag]
    return opts


def write_manifest(out: Path) -> int:
    lines = []
    for f in sorted(out.iterdir()):
        if f.is_file() and f.name != MANIFEST:
            lines.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n")
    (out / MANIFEST).write_text("".join(lines))
    return len(lines)


def build(args: argparse.Namespace) -> None:
    out: Path = args.out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder: name a new one")
    if not (args.project / "pyproject.toml").is_file():
        raise UsageError(f"no pyproject.toml in {args.project}: --project must be an msrl checkout")
    target = target_options(args)
    extras = sorted({e.strip() for e in args.extras.split(",") if e.strip()})
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory() as tmp:
        # 1. msrl itself, as a wheel built from a clean copy of the checkout
        isolation = ["--no-build-isolation"] if args.no_build_isolation else []
        src = clean_copy(args.project.resolve(), Path(tmp) / "src")
        pip("wheel", "--no-deps", *isolation, "-w", str(out), str(src))
        wheels = sorted(out.glob("msrl-*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"{PROG}: expected one msrl wheel in {out}, found {[w.name for w in wheels]}")
        meta = wheel_metadata(wheels[0])
        known = sorted(meta.get_all("Provides-Extra") or [])
        unknown = [e for e in extras if e not in known]
        if unknown:
            wheels[0].unlink()
            raise UsageError(f"unknown extra {unknown[0]!r}: choose from {', '.join(known)}")

        constraints = constraints_file(args, Path(tmp))
        cons = ["-c", str(constraints)] if constraints else []
        source_reqs: list[str] = []
        # 2. the cuda extra's packages as source distributions (built by the installer with nvcc)
        if SOURCE_EXTRA in extras and not args.no_deps:
            for req in extra_requirements(meta, SOURCE_EXTRA):
                name = re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0]
                pip("download", "--no-deps", f"--no-binary={name}", *cons, "-d", str(out), req)
                sdist = next(iter(sorted(out.glob(f"{name}-*.tar.gz"))), None)
                if sdist is None:
                    raise SystemExit(f"{PROG}: pip saved no source distribution of {name} in {out}")
                source_reqs += sdist_requirements(sdist)
        # 3. every other dependency, as wheels for the target Python and platform
        if not args.no_deps:
            binary_extras = [e for e in extras if e != SOURCE_EXTRA]
            spec = f"{wheels[0]}[{','.join(binary_extras)}]" if binary_extras else str(wheels[0])
            reqs = [spec, *source_reqs, *([args.torch] if args.torch else [])]
            index = ["--extra-index-url", args.torch_index] if args.torch_index else []
            pip("download", "--only-binary=:all:", *cons, *target, *index, "-d", str(out), *reqs)

    # 4. the installer, what was asked for, and the manifest over all of it
    shutil.copy2(HERE / INSTALLER, out / INSTALLER)
    torch_files = sorted(f.name for f in out.glob("torch-*.whl"))
    info = {
        "msrl": meta["Version"],
        "extras": extras,
        "python": args.python_version or f"{sys.version_info[0]}.{sys.version_info[1]}",
        "platform": args.platform or [sysconfig.get_platform()],
        "no_deps": args.no_deps,
        "torch": torch_files[0] if torch_files else None,
        "source_requires": source_reqs,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    (out / INFO).write_text(json.dumps(info, indent=2) + "\n")
    count = write_manifest(out)
    print(f"wheelhouse: {out} ({count} files listed in {MANIFEST}; torch: {info['torch'] or 'none'})", flush=True)
    print(f"next: copy the folder to the air-gapped machine and run python {out.name}/{INSTALLER}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        build(args)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
