"""Checkpoints: written atomically, loaded with ``torch.load(weights_only=True)``,
verified against their manifest before anything in them is used.

A checkpoint holds the validated config, the iteration and env-step counters
and every component's state, so a resumed run continues exactly where the
saved one stopped.  Its ``manifest`` holds a SHA-256 of everything else (every
tensor's dtype, shape and bytes, every key and plain value, in a fixed order):
torch's zip format does not check its tensor data, so a flipped byte would
otherwise load as a silently different network.  The config inside, and so the
algorithm it names, is read only after the digest matches.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import zipfile
from typing import Any

import torch

from msrl.core import CheckpointError

FORMAT = "msrl-checkpoint/2"
_REQUIRED = ("format", "config", "iteration", "env_steps", "components")


def digest(payload: Any) -> str:
    """SHA-256 of a checkpoint's contents (tensors by dtype, shape and bytes; mappings in key order)."""
    sha = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            data = value.detach().cpu().contiguous()
            sha.update(f"T{data.dtype}{tuple(data.shape)}".encode())
            sha.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            sha.update(f"D{len(value)}".encode())
            for key in sorted(value, key=repr):
                sha.update(repr(key).encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            sha.update(f"L{len(value)}".encode())
            for item in value:
                feed(item)
        else:
            sha.update(f"V{type(value).__name__}:{value!r}".encode())

    feed(payload)
    return sha.hexdigest()


def save_checkpoint(path: str, payload: dict[str, Any]) -> None:
    """Write to a temporary file in the same directory, then rename: a crash
    mid-write never leaves a truncated checkpoint behind."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", dir=directory)
    try:
        content = {"format": FORMAT, **payload}
        with os.fdopen(fd, "wb") as handle:
            torch.save({**content, "manifest": {"sha256": digest(content)}}, handle)
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
    manifest = payload.pop("manifest", None)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("sha256"), str):
        raise CheckpointError(f"checkpoint {path!r} has no manifest; it cannot be verified")
    if digest(payload) != manifest["sha256"]:
        raise CheckpointError(f"checkpoint {path!r} does not match its manifest's SHA-256: its contents were changed "
                              f"or damaged after it was written")
    missing = [key for key in _REQUIRED if key not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path!r} is incomplete: missing {', '.join(missing)}")
    return payload
