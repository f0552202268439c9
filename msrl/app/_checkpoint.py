"""Checkpoints: written atomically, loaded with ``torch.load(weights_only=True)``.

A checkpoint holds the validated config, the iteration and env-step counters
and every component's state, so a resumed run continues exactly where the
saved one stopped.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from typing import Any

import torch

from msrl.core import CheckpointError

FORMAT = "msrl-checkpoint/1"
_REQUIRED = ("format", "config", "iteration", "env_steps", "components")


def save_checkpoint(path: str, payload: dict[str, Any]) -> None:
    """Write to a temporary file in the same directory, then rename: a crash
    mid-write never leaves a truncated checkpoint behind."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save({"format": FORMAT, **payload}, handle)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} not found")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, OSError) as exc:
        # torch's own message suggests weights_only=False, which would run arbitrary pickled code: not repeated here.
        raise CheckpointError(f"checkpoint {path!r} is corrupt or not an msrl checkpoint ({type(exc).__name__})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path!r} is not an msrl checkpoint (expected format {FORMAT})")
    missing = [key for key in _REQUIRED if key not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path!r} is incomplete: missing {', '.join(missing)}")
    return payload
