"""The air-gapped install (docs/airgapped-install.md): tools/airgap/make_wheelhouse.py makes a
wheelhouse, the install_offline.py inside it checks it and installs from it with no index.

The default tier makes a wheelhouse of msrl alone (``--no-deps``), checks that a changed, missing or
unlisted file is refused with exit code 2, and installs it into a fresh venv with ``nvcc`` off
``PATH``, where the pycuda step must be skipped in one line.  The slow test makes the full wheelhouse
(base install and the ``cuda`` extra) from this machine's package index, installs it with every
network route cut, runs ``msrl --help``, and builds pycuda from its sdist with the local ``nvcc``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "tools" / "airgap" / "make_wheelhouse.py"
WHEEL = "msrl-0.1.0-py3-none-any.whl"
NO_NETWORK = {p: "http://127.0.0.1:9" for p in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
"""A proxy that refuses every connection: pip under it can reach no index, so an install that
succeeds took everything from the wheelhouse."""


def run(
    script: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def offline_env(without_nvcc: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update(NO_NETWORK)
    if without_nvcc:
        env.pop("CUDA_HOME", None)
        env.pop("CUDA_PATH", None)
        env["PATH"] = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if not (Path(d) / "nvcc").exists())
        assert shutil.which("nvcc", path=env["PATH"]) is None
    return env


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("airgap") / "wheelhouse"
    made = run(BUILDER, str(out), "--no-deps", "--no-build-isolation", "--extras", "cuda")
    assert made.returncode == 0, made.stdout + made.stderr
    return out


def test_wheelhouse_lists_every_file_with_its_sha256(wheelhouse: Path) -> None:
    names = sorted(f.name for f in wheelhouse.iterdir())
    assert names == sorted(["SHA256SUMS", WHEEL, "install_offline.py", "wheelhouse.json"])
    info = json.loads((wheelhouse / "wheelhouse.json").read_text())
    assert info["extras"] == ["cuda"] and info["no_deps"] is True
    assert info["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    # the manifest is in sha256sum's own format, so the coreutils check agrees with the installer's
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=wheelhouse, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        assert check.stdout.count(": OK") == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("append", f"{WHEEL} does not match its sha256 in SHA256SUMS"),
        ("remove", f"{WHEEL} is listed in SHA256SUMS but missing"),
        ("add", "extra-1.0-py3-none-any.whl in"),
    ],
)
def test_a_changed_wheelhouse_is_refused_before_anything_is_installed(
    wheelhouse: Path, tmp_path: Path, change: str, message: str
) -> None:
    copy = tmp_path / "wheelhouse"
    shutil.copytree(wheelhouse, copy)
    if change == "append":
        with open(copy / WHEEL, "ab") as f:
            f.write(b"\0")
    elif change == "remove":
        (copy / WHEEL).unlink()
    else:
        (copy / "extra-1.0-py3-none-any.whl").write_bytes(b"not in the manifest")
    venv = tmp_path / "venv"
    done = run(copy / "install_offline.py", "--venv", str(venv), env=offline_env(without_nvcc=True))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("install_offline: error: ") and message in lines[0]
    assert not venv.exists()
    # the untouched wheelhouse passes the same check
    intact = run(wheelhouse / "install_offline.py", "--check", env=offline_env(without_nvcc=True))
    assert intact.returncode == 0 and "wheelhouse: 3 files match" in intact.stdout, intact.stdout + intact.stderr


def test_bad_input_is_one_line_with_exit_code_2(wheelhouse: Path, tmp_path: Path) -> None:
    taken = run(BUILDER, str(wheelhouse), "--no-deps")
    assert taken.returncode == 2 and "is not an empty folder" in taken.stderr
    version = run(BUILDER, str(tmp_path / "w"), "--python-version", "311")
    assert version.returncode == 2 and "--python-version must be MAJOR.MINOR" in version.stderr
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("not a venv")
    venv = run(wheelhouse / "install_offline.py", "--check", "--venv", str(tmp_path / "notes"))
    assert venv.returncode == 2 and "exists and is not a virtual environment" in venv.stderr
    extra = run(wheelhouse / "install_offline.py", "--venv", str(tmp_path / "v"), "--extras", "mujoco")
    assert extra.returncode == 2
    assert extra.stderr.strip() == (
        "install_offline: error: the wheelhouse was not made for the extra 'mujoco': choose from its extras (cuda)"
    )


def test_check_skips_pycuda_in_one_line_without_nvcc_and_finds_the_toolkit_with_it(
    wheelhouse: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    without = run(wheelhouse / "install_offline.py", "--check", "--venv", str(venv), env=offline_env(True))
    assert without.returncode == 0, without.stdout + without.stderr
    pycuda_lines = [ln for ln in without.stdout.splitlines() if ln.startswith("pycuda")]
    assert len(pycuda_lines) == 1 and pycuda_lines[0].startswith("pycuda: skipped: no nvcc on PATH"), without.stdout
    assert not venv.exists()  # --check installs nothing
    if shutil.which("nvcc") is None:
        return
    # with nvcc on PATH (a wrapper script on some machines), the toolkit it belongs to is found; this
    # wheelhouse (--no-deps) has no pycuda sdist, which is then refused before anything is installed
    found = run(wheelhouse / "install_offline.py", "--check", "--venv", str(venv), env=offline_env(False))
    assert found.returncode == 2, found.stdout + found.stderr
    toolkit = [ln for ln in found.stdout.splitlines() if ln.startswith("pycuda: nvcc ")]
    assert len(toolkit) == 1, found.stdout
    assert (Path(toolkit[0].split(", CUDA toolkit in ")[1]) / "include" / "cuda.h").is_file()
    assert found.stderr.strip() == (
        "install_offline: error: the wheelhouse has no pycuda source distribution: make it with --extras cuda"
    )


@pytest.mark.slow  # creating a venv and installing into it: 30 s on the shared 2-core machine
def test_offline_install_into_a_fresh_venv_skips_pycuda_in_one_line_without_nvcc(
    wheelhouse: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    done = run(wheelhouse / "install_offline.py", "--venv", str(venv), env=offline_env(without_nvcc=True))
    assert done.returncode == 0, done.stdout + done.stderr
    pycuda_lines = [ln for ln in done.stdout.splitlines() if ln.startswith("pycuda")]
    assert len(pycuda_lines) == 1 and pycuda_lines[0].startswith("pycuda: skipped: no nvcc on PATH")
    # msrl came from the wheelhouse's wheel into the new venv (its own site-packages, not this checkout)
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.util as u; print(u.find_spec('msrl').origin)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv.resolve()), where.stdout + where.stderr
    assert (venv / "bin" / "msrl").is_file()


def glibc_minor(platform_tag: str) -> int | None:
    """The glibc 2.x minor a wheel's platform tag needs (None: any platform)."""
    legacy = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
    if platform_tag == "any":
        return None
    if platform_tag.startswith("manylinux_2_"):
        return int(platform_tag.split("_")[2])
    return legacy[platform_tag.split("_")[0]]


@pytest.mark.slow
@pytest.mark.timeout(3600)  # downloads Ray and torch's wheels, installs them, compiles pycuda: minutes on 2 cores
def test_full_round_trip_from_the_index_to_an_offline_venv_with_pycuda_built(tmp_path: Path) -> None:
    """The base install and the cuda extra, made from this machine's index (pip's configuration
    honoured) and installed with no network.  Where nvcc is here, pycuda is built from its sdist;
    with no driver on this machine, it links against a stand-in libcuda.so (as the toolkit's
    lib64/stubs one is used on login nodes), and the check is that the extension module was built
    against the driver API.  The target is named as for a cluster with an older glibc (2.28) than
    this machine's: every wheel taken must run there."""
    out = tmp_path / "wheelhouse"
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    target = ["--python-version", python, "--platform", "manylinux_2_28_x86_64"]
    made = run(BUILDER, str(out), "--extras", "cuda", *target, timeout=1800)
    assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]
    files = {f.name for f in out.iterdir()}
    assert WHEEL in files and any(f.startswith("pycuda-") and f.endswith(".tar.gz") for f in files)
    assert any(f.startswith("torch-") for f in files) and any(f.startswith("ray-") for f in files)
    for wheel in (f for f in files if f.endswith(".whl")):
        needs = [glibc_minor(tag) for tag in wheel[: -len(".whl")].split("-")[-1].split(".")]
        assert None in needs or min(n for n in needs if n is not None) <= 28, wheel

    args = ["--venv", str(tmp_path / "venv")]
    nvcc = shutil.which("nvcc")
    gcc = shutil.which("gcc")
    if nvcc and gcc:
        stub = tmp_path / "driver-stub"
        stub.mkdir()
        (stub / "empty.c").write_text("")
        cc = [
            gcc,
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            str(stub / "libcuda.so"),
            str(stub / "empty.c"),
        ]
        subprocess.run(cc, check=True)
        args += ["--cuda-lib-dir", str(stub)]
    done = run(out / "install_offline.py", *args, env=offline_env(without_nvcc=nvcc is None), timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-4000:]
    assert "smoke check: msrl --help ran" in done.stdout
    if nvcc and gcc:
        built = [ln for ln in done.stdout.splitlines() if ln.startswith("pycuda: built ")]
        assert len(built) == 1 and Path(built[0].split()[-1]).is_file(), done.stdout[-3000:]
        if shutil.which("nm"):  # the CUDA driver API, to be resolved by the real libcuda.so.1 at load time
            symbols = subprocess.run(["nm", "-D", "--undefined-only", built[0].split()[-1]], capture_output=True)
            assert b" cuInit" in symbols.stdout
    else:
        assert "pycuda: skipped: no nvcc" in done.stdout
    helped = subprocess.run([str(tmp_path / "venv" / "bin" / "msrl"), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "train" in helped.stdout
