"""``msrl train --address`` where no Ray cluster answers: one ``msrl: error:`` line and exit 2 in
seconds, nothing written (``ray.init`` alone retries such an address for minutes)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "ppo_cartpole.yaml")


def test_an_address_where_nothing_listens_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]  # free again once closed: connecting is refused
    address = f"ray://127.0.0.1:{port}"
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "msrl", "train", CONFIG, "--address", address]
        + ["--set", "policy=single_learner_coarse", "--set", f"runs_dir={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"msrl: error: no Ray cluster answers at {address}: "), line
    assert "leave out --address" in line
    assert time.monotonic() - start < 60.0
    assert list(tmp_path.iterdir()) == []
