#!/usr/bin/env python3
"""Install msrl from a wheelhouse on a machine with no package registry.

The wheelhouse is the folder that ``tools/airgap/make_wheelhouse.py`` wrote on a connected machine;
this script travels inside it.  It

1. checks every file of the wheelhouse against ``SHA256SUMS`` (a changed, missing or unlisted file
   stops it with exit code 2 before anything is installed);
2. creates a virtual environment (or reuses one) and installs ``msrl[EXTRAS]`` with
   ``pip install --no-index --find-links WHEELHOUSE``, ignoring pip's configuration on this machine;
3. for the ``cuda`` extra, builds pycuda from its source distribution against the CUDA toolkit that
   ``nvcc`` belongs to (``CUDA_HOME``, or nvcc on ``PATH``); where there is no nvcc it says so in one
   line and installs the rest;
4. runs ``msrl --help``, and imports ``pycuda.driver`` where pycuda was built and a GPU is present.

With ``--check`` it stops after checking the wheelhouse, the Python and the CUDA toolkit, having said
what it would do.

Example (see docs/airgapped-install.md)::

    python3 wheelhouse/install_offline.py --venv ~/msrl-venv

Only the Python standard library is used.  Exit codes: 0 installed, 2 bad input or a wheelhouse that
fails its check, 1 a step that failed (pip's or the build's output is printed above the message).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PROG = "install_offline"
MANIFEST = "SHA256SUMS"
INFO = "wheelhouse.json"
SOURCE_EXTRA = "cuda"
DOC = "docs/airgapped-install.md"


class UsageError(Exception):
    """Bad input or a wheelhouse that fails its check: one ``install_offline: error:`` line, exit 2."""


class StepError(Exception):
    """A step that ran and failed: exit 1."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--wheelhouse",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="the wheelhouse folder (default: the folder this script is in)",
    )
    p.add_argument("--venv", type=Path, default=Path("msrl-venv"), help="virtual environment to create or reuse")
    p.add_argument("--python", default=sys.executable, help="the Python that creates the venv (default: this one)")
    p.add_argument("--extras", help="comma-separated msrl extras (default: those the wheelhouse was made with)")
    p.add_argument(
        "--cuda-lib-dir",
        action="append",
        default=[],
        help="another folder holding libcuda.so for linking pycuda (repeatable), e.g. the toolkit's lib64/stubs",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="check the wheelhouse, the Python and the CUDA toolkit, say what would be done, install nothing",
    )
    return p.parse_args(argv)


# -- 1. the manifest ------------------------------------------------------------------------------


def verify(wheelhouse: Path) -> int:
    """Check every file against SHA256SUMS; return how many were checked."""
    manifest = wheelhouse / MANIFEST
    if not manifest.is_file():
        raise UsageError(f"{manifest} not found: is {wheelhouse} a wheelhouse made by make_wheelhouse.py?")
    listed: dict[str, str] = {}
    for n, line in enumerate(manifest.read_text().splitlines(), 1):
        m = re.fullmatch(r"([0-9a-f]{64}) [ *]([^/\\]+)", line.strip())
        if not m or m.group(2) in (".", ".."):
            raise UsageError(f"{manifest} line {n} is not 'sha256  filename': {line[:80]!r}")
        listed[m.group(2)] = m.group(1)
    present = {f.name for f in wheelhouse.iterdir() if f.is_file() and f.name != MANIFEST}
    unlisted = sorted(present - listed.keys())
    if unlisted:
        name = unlisted[0]
        raise UsageError(f"{name} in {wheelhouse} is not in {MANIFEST}: the wheelhouse was changed after it was made")
    for name, digest in sorted(listed.items()):
        path = wheelhouse / name
        if name not in present:
            raise UsageError(f"{name} is listed in {MANIFEST} but missing from {wheelhouse}: copy the whole folder")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != digest:
            raise UsageError(f"{name} does not match its sha256 in {MANIFEST}: the file is damaged or was changed")
    return len(listed)


# -- 2. the virtual environment and msrl ----------------------------------------------------------


def run(cmd: list[str], what: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    print("+ " + " ".join(cmd), flush=True)
    if subprocess.run(cmd, env=env, cwd=cwd).returncode != 0:
        raise StepError(f"{what} failed (its output is above)")


def offline_env() -> dict[str, str]:
    """This process's environment without pip's settings: only the wheelhouse may supply packages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def python_version(python: str) -> str:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True)
    except OSError as e:
        raise UsageError(f"cannot run --python {python}: {e.strerror}") from e
    if out.returncode != 0:
        raise UsageError(f"cannot run --python {python}")
    return out.stdout.decode().strip()


def make_venv(args: argparse.Namespace, want: str) -> Path:
    venv: Path = args.venv.resolve()
    py = venv / "bin" / "python"
    if (venv / "pyvenv.cfg").is_file():
        print(f"venv: reusing {venv}", flush=True)
    else:
        run([args.python, "-m", "venv", str(venv)], "creating the venv")
    have = python_version(str(py))
    if have != want:
        raise UsageError(f"the wheelhouse is for Python {want}, the venv {venv} has {have}: name a new --venv")
    return py


def pip_install(py: Path, wheelhouse: Path, *reqs: str, no_deps: bool = False, isolation: bool = True) -> None:
    cmd = [str(py), "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse)]
    cmd += (["--no-deps"] if no_deps else []) + ([] if isolation else ["--no-build-isolation"])
    run(cmd + list(reqs), f"pip install {' '.join(reqs)}", env=offline_env())


# -- 3. pycuda from its source distribution --------------------------------------------------------


def cuda_root() -> tuple[Path, Path] | None:
    """(toolkit root, nvcc) from CUDA_HOME or CUDA_PATH, else from the nvcc on PATH; None without nvcc."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home).resolve(), Path(home) / "bin" / "nvcc"
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    # nvcc on PATH may be a wrapper script or a link: ask nvcc where its own folder is
    roots = []
    dry = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull], capture_output=True)
    m = re.search(r"^#\$ _HERE_=(.+)$", (dry.stdout + dry.stderr).decode(errors="replace"), re.M)
    if m:
        roots.append(Path(m.group(1).strip()).parent)
    roots.append(Path(nvcc).resolve().parent.parent)
    for candidate in roots:
        if (candidate / "include" / "cuda.h").is_file():
            return candidate.resolve(), Path(nvcc)
    return roots[0].resolve(), Path(nvcc)


def build_pycuda(py: Path, wheelhouse: Path, info: dict, root: Path, extra_lib_dirs: list[str]) -> None:
    """Build pycuda from its sdist against the toolkit in ``root`` and install it into the venv."""
    sdists = sorted(wheelhouse.glob("pycuda-*.tar.gz"))
    print(f"pycuda: building {sdists[0].name} against the CUDA toolkit in {root}", flush=True)
    # the build runs without build isolation: its own requirements come from the wheelhouse first
    pip_install(py, wheelhouse, *info.get("source_requires", []))
    lib_dirs = [str(root / d) for d in ("lib64", "lib", "lib64/stubs", "lib/stubs")] + extra_lib_dirs
    configure = [f"--cuda-root={root}"]
    for lib in ("cudadrv", "cudart", "curand"):
        configure.append(f"--{lib}-lib-dir={','.join(lib_dirs)}")
    if not (root / "include" / "curand.h").is_file():
        print(
            f"pycuda: no curand.h under {root}/include: building without pycuda.curandom (msrl does not use it)",
            flush=True,
        )
        configure.append("--no-cuda-enable-curand")
    with tempfile.TemporaryDirectory(prefix="pycuda-build-") as tmp:
        with tarfile.open(sdists[0]) as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(tmp, filter="data")
            else:  # Python without extraction filters: the sdist's checksum was verified above
                tf.extractall(tmp)
        src = next(p for p in Path(tmp).iterdir() if p.is_dir())
        run([str(py), "configure.py", *configure], "pycuda's configure.py", cwd=src)
        try:
            pip_install(py, wheelhouse, str(src), isolation=False)
        except StepError as e:
            raise StepError(f"building pycuda {e}: see 'When pycuda does not build' in {DOC}") from e
    check = "import importlib.util, pathlib; s = importlib.util.find_spec('pycuda'); "
    check += "print(*pathlib.Path(s.origin).parent.glob('_driver*'))"
    out = subprocess.run([str(py), "-c", check], capture_output=True).stdout.decode().strip()
    if not out:
        raise StepError("pycuda installed without its _driver extension module")
    print(f"pycuda: built {out}", flush=True)


# -- 4. the smoke check ------------------------------------------------------------------------------


def gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    out = subprocess.run([smi, "-L"], capture_output=True)
    return out.returncode == 0 and b"GPU" in out.stdout


def smoke_check(py: Path, no_deps: bool, pycuda_built: bool) -> None:
    bindir = py.parent
    if no_deps:
        run([str(py), "-c", "import importlib.metadata as m; print('msrl', m.version('msrl'))"], "msrl's metadata")
        if not (bindir / "msrl").is_file():
            raise StepError(f"no msrl command in {bindir}")
        print(
            "smoke check: msrl is installed without its dependencies (a --no-deps wheelhouse): msrl --help not run",
            flush=True,
        )
    else:
        run([str(bindir / "msrl"), "--help"], "msrl --help")
        print("smoke check: msrl --help ran", flush=True)
    if pycuda_built and gpu_present():
        run([str(py), "-c", "import pycuda.driver as d; d.init(); print('pycuda: GPUs', d.Device.count())"], "pycuda")
    elif pycuda_built:
        print("smoke check: no GPU here (nvidia-smi -L lists none): pycuda.driver not imported", flush=True)


def plan(args: argparse.Namespace, wheelhouse: Path, info: dict) -> tuple[list[str], Path | None]:
    """Everything checked before installing anything: the extras, the Python, the CUDA toolkit.
    Returns the extras and the toolkit root to build pycuda against (None: no pycuda build)."""
    extras = info["extras"] if args.extras is None else [e.strip() for e in args.extras.split(",") if e.strip()]
    missing = [e for e in extras if e not in info["extras"]]
    if missing:
        made = ", ".join(info["extras"]) or "none"
        raise UsageError(f"the wheelhouse was not made for the extra {missing[0]!r}: choose from its extras ({made})")
    if not (args.venv / "pyvenv.cfg").is_file():
        if args.venv.exists() and (not args.venv.is_dir() or any(args.venv.iterdir())):
            raise UsageError(f"--venv {args.venv} exists and is not a virtual environment: name a new folder")
        have = python_version(args.python)
        if have != info["python"]:
            raise UsageError(
                f"the wheelhouse is for Python {info['python']}, {args.python} is {have}: pass --python "
                f"python{info['python']}, or make the wheelhouse with --python-version {have}"
            )
    print(f"msrl {info['msrl']}: extras {','.join(extras) or 'none'}, Python {info['python']}", flush=True)
    if SOURCE_EXTRA not in extras:
        return extras, None
    found = cuda_root()
    if found is None:
        print(
            "pycuda: skipped: no nvcc on PATH or under CUDA_HOME (msrl's cuda executor needs it; see " + DOC + ")",
            flush=True,
        )
        return extras, None
    root, nvcc = found
    print(f"pycuda: nvcc {nvcc}, CUDA toolkit in {root}", flush=True)
    if not (root / "include" / "cuda.h").is_file():
        raise UsageError(f"no cuda.h under {root}/include: set CUDA_HOME to the CUDA toolkit's root")
    sdists = sorted(wheelhouse.glob("pycuda-*.tar.gz"))
    if not sdists:
        raise UsageError(f"the wheelhouse has no pycuda source distribution: make it with --extras {SOURCE_EXTRA}")
    print(f"pycuda: {sdists[0].name} will be built against that toolkit", flush=True)
    return extras, root


def install(args: argparse.Namespace) -> None:
    wheelhouse: Path = args.wheelhouse.resolve()
    count = verify(wheelhouse)
    print(f"wheelhouse: {count} files match {wheelhouse / MANIFEST}", flush=True)
    info = json.loads((wheelhouse / INFO).read_text())
    extras, cuda = plan(args, wheelhouse, info)
    if args.check:
        return
    py = make_venv(args, info["python"])
    binary = [e for e in extras if e != SOURCE_EXTRA]
    pip_install(py, wheelhouse, f"msrl[{','.join(binary)}]" if binary else "msrl", no_deps=info["no_deps"])
    if cuda is not None:
        build_pycuda(py, wheelhouse, info, cuda, args.cuda_lib_dir)
    smoke_check(py, info["no_deps"], cuda is not None)
    print(f"msrl installed in {py.parent.parent}: source {py.parent / 'activate'} to use it", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        install(args)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except StepError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
