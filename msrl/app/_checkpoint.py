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
import tempfile
from typing import IO, Any, cast

import torch

from msrl.app._run_directory import free_bytes, storage_message
from msrl.core import CheckpointError, ConfigError, StorageError, check_plain_tree

FORMAT = "msrl-checkpoint/2"
_REQUIRED = ("format", "config", "iteration", "env_steps", "components")


MAX_VALUES = 2_000_000
"""Most values (tensors, mappings, lists, scalars) a checkpoint holds, counted as the digest walks
them: a real one holds a few thousand (a DQN run's, its 100k-transition replay buffer included:
tensors count once), while one crafted with shared references walks as a tree of 10^25."""
MAX_DEPTH = 64
"""Deepest nesting in a checkpoint (real ones: under 10); a cycle is infinitely deep."""


def check_size(payload: Any) -> None:
    """Refuse, before walking it as a tree, a payload that would walk as over ``MAX_VALUES`` values or
    nests over ``MAX_DEPTH`` levels: each container's expanded size is worked out once (its id
    remembered), so shared references cost what they take on disk, not what they expand to."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()

    def size(value: Any, depth: int) -> int:
        if not isinstance(value, (dict, list, tuple)):
            return 1
        key = id(value)
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH or key in open_ids:
            raise CheckpointError(f"checkpoint nests over {MAX_DEPTH} levels (a cycle?); an msrl checkpoint never does")
        open_ids.add(key)
        children = value.values() if isinstance(value, dict) else value
        total = 1 + sum(size(child, depth + 1) for child in children)
        open_ids.discard(key)
        if total > MAX_VALUES:
            raise CheckpointError(
                f"checkpoint expands to over {MAX_VALUES:,} values (shared references?); "
                f"an msrl checkpoint holds a few thousand"
            )
        sizes[key] = total
        return total

    size(payload, 0)


def digest(payload: Any) -> str:
    """SHA-256 of a checkpoint's contents (tensors by dtype, shape and bytes; mappings in key order).
    A payload of over ``MAX_VALUES`` values or ``MAX_DEPTH`` levels is refused as it is walked."""
    sha = hashlib.sha256()
    visited = 0

    def feed(value: Any, depth: int = 0) -> None:
        nonlocal visited
        visited += 1
        if visited > MAX_VALUES or depth > MAX_DEPTH:
            raise CheckpointError(
                f"checkpoint holds over {MAX_VALUES:,} values or nests over {MAX_DEPTH} levels "
                f"(shared references or a cycle?); an msrl checkpoint never does"
            )
        if isinstance(value, torch.Tensor):
            data = value.detach().cpu().contiguous()
            sha.update(f"T{data.dtype}{tuple(data.shape)}".encode())
            sha.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            sha.update(f"D{len(value)}".encode())
            for key in sorted(value, key=repr):
                sha.update(repr(key).encode())
                feed(value[key], depth + 1)
        elif isinstance(value, (list, tuple)):
            sha.update(f"L{len(value)}".encode())
            for item in value:
                feed(item, depth + 1)
        else:
            sha.update(f"V{type(value).__name__}:{value!r}".encode())

    feed(payload)
    return sha.hexdigest()


def save_checkpoint(path: str, payload: dict[str, Any]) -> None:
    """Write to a temporary file in the same directory, make it durable (``fsync``), then rename:
    a crash or a full disk mid-write never leaves a truncated checkpoint behind, and the one
    before stays as it was.  A directory that cannot take the file (full, read-only, gone) is a
    ``StorageError`` naming the path and the bytes the checkpoint needs."""
    directory = os.path.dirname(os.path.abspath(path))
    content = {"format": FORMAT, **payload}
    whole = {**content, "manifest": {"sha256": digest(content)}}
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ckpt-", dir=directory)
        with os.fdopen(fd, "wb") as handle:
            torch.save(whole, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
        _sync_directory(directory)
    except (OSError, RuntimeError) as exc:
        # torch's zip writer reports a short write as a RuntimeError ("unexpected pos ..."): a
        # storage fault wherever the directory cannot take the bytes; anything else is torch's own
        if tmp is not None and os.path.exists(tmp):  # its bytes are not free space: gone before counting
            os.unlink(tmp)
            tmp = None
        needed = serialized_size(whole)
        free = free_bytes(directory)
        if isinstance(exc, RuntimeError) and os.access(directory, os.W_OK) and (free is None or free >= needed):
            raise
        raise StorageError(storage_message(f"checkpoint {path}", exc, needed, free)) from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


class _Counter:
    """A file-like sink that only counts what is written to it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def serialized_size(value: Any) -> int:
    """The bytes ``torch.save(value)`` writes, counted without keeping them."""
    counter = _Counter()
    torch.save(value, cast(IO[bytes], counter))  # torch's writer calls write and flush only
    return counter.size


def _sync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable: ``fsync`` of the directory itself, where allowed."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_checkpoint(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} not found")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any bytes reach here: torch's legacy reader raises IndexError, struct.error...
        # torch's own message suggests weights_only=False, which would run arbitrary pickled code: not repeated here.
        raise CheckpointError(
            f"checkpoint {path!r} is corrupt or not an msrl checkpoint ({type(exc).__name__})"
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path!r} is not an msrl checkpoint (expected format {FORMAT})")
    check_size(payload)
    manifest = payload.pop("manifest", None)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("sha256"), str):
        raise CheckpointError(f"checkpoint {path!r} has no manifest; it cannot be verified")
    if digest(payload) != manifest["sha256"]:
        raise CheckpointError(
            f"checkpoint {path!r} does not match its manifest's SHA-256: its contents were changed "
            f"or damaged after it was written"
        )
    missing = [key for key in _REQUIRED if key not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path!r} is incomplete: missing {', '.join(missing)}")
    try:
        check_plain_tree(payload["config"], "its config")
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {path!r}: {exc}") from None
    return payload
