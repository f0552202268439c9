"""The low-latency path between replicas on one node.

A Ray actor call costs one to a few milliseconds on a busy machine; a
SEED-RL-style policy pays it twice per environment step, and a coarse one
several times per iteration.  Replicas on the same node instead talk over Unix
domain sockets: no network port is opened at all, and the socket lives in a
private (0700) temporary directory, so only this user's processes can connect.
Traffic to other nodes keeps using Ray actor calls.

Frames are ``[8-byte length][pickle]`` of ``(node, src, seq, payload)``; a
reader thread per connection hands them to the worker's mailbox.  CPU tensors
travel as NumPy arrays: pickling a torch tensor costs ten times more (a
rollout batch: 0.4 ms against 0.02 ms, each way).

Large arrays (``SHARED_MIN_BYTES`` and up: a rollout of Atari frames is 29 MB)
do not go through the socket: the sender writes each into a file of its own
in the listener's private directory, on ``/dev/shm`` (memory, not disk) where
the machine has it, and pickles its name; the receiver maps the file, unlinks
it, and hands on an array over the mapping.  That is one copy, the sender's,
instead of four (into the pickle, through the socket both ways, out of the
pickle); the receiver's array is the shared memory itself.  A segment whose
message is never read goes with the directory when the listener closes.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import shutil
import socket
import struct
import tempfile
import threading
from typing import Any

import numpy as np
import torch

from cluster._transport import Mailbox

_HEADER = struct.Struct("!Q")

SHARED_MIN_BYTES = 1 << 20
"""Arrays this large or larger cross through a shared-memory file instead of the socket."""


def _socket_root() -> str | None:
    """Where listeners make their private directories: ``/dev/shm`` where it is a writable
    directory, so that shared segments are memory; else the temporary directory."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


SOCKET_ROOT = _socket_root() or tempfile.gettempdir()
"""The parent of every listener's ``msrl-*`` directory on this machine."""


class DirectListener:
    """Accepts same-node peers on a Unix socket and feeds their frames to ``mailbox``."""

    def __init__(self, mailbox: Mailbox, name: str) -> None:
        self.mailbox = mailbox
        self.directory = tempfile.mkdtemp(prefix="msrl-", dir=SOCKET_ROOT)  # mkdtemp creates it 0700
        self.path = os.path.join(self.directory, f"{name}.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(64)
        self.closed = False
        self.threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._read, args=(conn,), name="msrl-direct-reader", daemon=True)
            thread.start()
            self.threads.append(thread)

    def _read(self, conn: socket.socket) -> None:
        with conn:
            while True:
                header = _recv_exact(conn, _HEADER.size)
                if header is None:
                    return
                body = _recv_exact(conn, _HEADER.unpack(header)[0])
                if body is None:
                    return
                self.mailbox.put(*pickle.loads(body))

    def close(self) -> None:
        self.closed = True
        try:
            self.server.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class DirectSender:
    """A connection to one same-node peer's ``DirectListener``."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.lock = threading.Lock()
        self.shared = os.path.dirname(path)  # the listener's private directory: large arrays go there
        self.shared_min_bytes = SHARED_MIN_BYTES

    def deliver(self, node: str, src: int, seq: int, payload: Any) -> None:
        body = _dumps((node, src, seq, payload), self.shared, self.shared_min_bytes)
        with self.lock:
            self.sock.sendall(_HEADER.pack(len(body)) + body)

    def close(self) -> None:
        self.sock.close()


_NUMPY_DTYPES = {
    torch.float16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
}


class _Pickler(pickle.Pickler):
    """Plain CPU tensors as NumPy arrays, the large ones through a shared-memory file in
    ``shared`` (see the module's docstring); anything else (CUDA, autograd, other dtypes) as torch
    pickles it."""

    def __init__(self, file: io.BytesIO, shared: str | None, shared_min_bytes: int) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared, self.shared_min_bytes = shared, shared_min_bytes

    def reducer_override(self, obj: Any) -> Any:
        if (
            type(obj) is torch.Tensor
            and obj.device.type == "cpu"
            and not obj.requires_grad
            and obj.layout == torch.strided
            and obj.dtype in _NUMPY_DTYPES
        ):
            array = obj.numpy()
            if self.shared is not None and array.nbytes >= self.shared_min_bytes:
                return _attach, (_share(array, self.shared), array.dtype.str, array.shape)
            return torch.from_numpy, (array,)
        return NotImplemented


def _dumps(value: Any, shared: str | None = None, shared_min_bytes: int = SHARED_MIN_BYTES) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, shared, shared_min_bytes).dump(value)
    return buffer.getvalue()


def _share(array: np.ndarray, directory: str) -> str:
    """Write ``array``'s bytes to a new file in ``directory``: its path."""
    fd, path = tempfile.mkstemp(prefix="segment-", dir=directory)
    try:
        with os.fdopen(fd, "wb", closefd=False) as file:
            file.write(np.ascontiguousarray(array).data)
    finally:
        os.close(fd)
    return path


def _attach(path: str, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The array a sender ``_share``d, as a tensor over the file's memory; the file is unlinked,
    so the memory is freed when the tensor is."""
    fd = os.open(path, os.O_RDWR)
    try:
        memory = mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
        os.unlink(path)
    return torch.from_numpy(np.frombuffer(memory, dtype=np.dtype(dtype)).reshape(shape))


def _recv_exact(conn: socket.socket, size: int) -> bytes | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        try:
            count = conn.recv_into(view[received:], size - received)
        except OSError:
            return None
        if count == 0:
            return None
        received += count
    return bytes(buffer)
