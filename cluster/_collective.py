"""Gradient all-reduce across learner replicas with torch.distributed: gloo for
learners on the CPU, NCCL for learners on CUDA devices (gloo on their CUDA
tensors where two replicas share one GPU, which NCCL refuses), formed across the
fragment-worker actors.

The rendezvous store is a small Ray actor rather than torch's TCPStore, whose
server listens on every interface; gloo itself binds to the node's Ray address.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

RENDEZVOUS_TIMEOUT_S = 60.0


class KeyValueStore:
    """The rendezvous data, held by one Ray actor (``ray.remote(KeyValueStore)``)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        current = self.data.get(key)
        if (current is None and not expected) or current == expected:
            self.data[key] = desired
            return desired
        return current if current is not None else expected

    def delete(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    def count(self) -> int:
        return len(self.data)


class RayStore(dist.Store):
    """A ``torch.distributed.Store`` backed by a ``KeyValueStore`` actor; blocking
    reads poll, which is fine for a rendezvous of a few keys."""

    def __init__(self, handle: Any, prefix: str, timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> None:
        super().__init__()
        self.handle, self.prefix, self.timeout_s = handle, prefix, timeout_s

    def _call(self, method: str, key: str | None = None, *args: Any) -> Any:
        """Keys carry the prefix here: torch's PrefixStore cannot wrap a Python store."""
        import ray

        call_args = (self.prefix + key, *args) if key is not None else args
        return ray.get(getattr(self.handle, method).remote(*call_args))

    def set(self, key: str, value: Any) -> None:
        self._call("set", key, _bytes(value))

    def get(self, key: str) -> bytes:
        deadline = time.monotonic() + self.timeout_s
        while (value := self._call("get", key)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"rendezvous key {key!r} not set within {self.timeout_s:g} s: a learner replica did not start"
                )
            time.sleep(0.005)
        return value

    def add(self, key: str, amount: int) -> int:
        return self._call("add", key, amount)

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return self._call("compare_set", key, _bytes(expected), _bytes(desired))

    def wait(self, keys: list[str], timeout: Any = None) -> None:
        for key in keys:
            self.get(key)

    def check(self, keys: list[str]) -> bool:
        return all(self._call("get", key) is not None for key in keys)

    def delete_key(self, key: str) -> bool:
        return self._call("delete", key)

    def num_keys(self) -> int:
        return self._call("count", None)

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self.timeout_s = timeout.total_seconds()


class GradientAllReduce:
    """The ``Learner.grad_sync`` hook: average gradients over every learner
    replica in one flat all-reduce, so replicas that start equal stay equal."""

    def __init__(self, group: Any, world_size: int, store: Any = None) -> None:
        self.group, self.world_size = group, world_size
        # The group's rendezvous store.  torch holds only the C++ side of a Python store, and NCCL reads
        # the store again when it creates its communicator, at the first collective: the Python object
        # must live as long as the group (collected earlier, the read fails with "Not implemented").
        self.store = store
        self.seconds = 0.0  # time in the collective, reported as communication rather than learning

    def __call__(self, parameters: Iterable[torch.Tensor]) -> None:
        start = time.perf_counter()
        try:
            self._allreduce(parameters)
        finally:
            self.seconds += time.perf_counter() - start

    def mean_(self, tensors: list[torch.Tensor]) -> None:
        """``Learner.sync_mean``: average plain tensors (statistics, not gradients) in place."""
        start = time.perf_counter()
        try:
            for dtype in dict.fromkeys(t.dtype for t in tensors):  # one all-reduce per dtype, no precision lost
                self._average([t for t in tensors if t.dtype == dtype])
        finally:
            self.seconds += time.perf_counter() - start

    def _allreduce(self, parameters: Iterable[torch.Tensor]) -> None:
        self._average([p.grad for p in parameters if p.grad is not None])

    def _average(self, tensors: list[torch.Tensor]) -> None:
        if not tensors:
            return
        flat = torch.cat([g.reshape(-1) for g in tensors])
        self.group.allreduce([flat]).wait()
        flat /= self.world_size
        offset = 0
        for tensor in tensors:
            tensor.copy_(flat[offset : offset + tensor.numel()].view_as(tensor))
            offset += tensor.numel()


def backend_for(device: str, shared: bool = False) -> str:
    """The collective for gradients that live on ``device``: NCCL keeps CUDA gradients on the GPU, but
    NCCL refuses two ranks on one GPU, so replicas that share a GPU (``shared``) all-reduce with gloo
    (which takes CUDA tensors too); CPU gradients use gloo."""
    return "nccl" if torch.device(device).type == "cuda" and not shared else "gloo"


def learner_group(
    store_handle: Any, prefix: str, rank: int, world_size: int, host: str, device: str
) -> tuple[Any, RayStore]:
    """The process group the learner replicas all-reduce their gradients in, and its store (which
    must outlive the group: ``GradientAllReduce`` keeps it)."""
    store = RayStore(store_handle, prefix)
    shared = torch.device(device).type == "cuda" and _shares_a_gpu(store, rank, world_size, device)
    if backend_for(device, shared) == "nccl":
        return nccl_group(store, rank, world_size), store
    return gloo_group(store, rank, world_size, host), store


def _shares_a_gpu(store: RayStore, rank: int, world_size: int, device: str) -> bool:
    """Whether two replicas of the group run on one GPU (each publishes its GPU's UUID): every replica
    reads the same keys, so all of them choose the same backend."""
    index = torch.device(device).index
    uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index).uuid)
    store.set(f"gpu/{rank}", uuid)
    return len({store.get(f"gpu/{r}") for r in range(world_size)}) < world_size


def nccl_group(store: RayStore, rank: int, world_size: int) -> Any:
    """An NCCL process group of ``world_size`` ranks, one CUDA device each (the worker's: Ray sets
    CUDA_VISIBLE_DEVICES per actor), rendezvousing through the same store as gloo."""
    if not dist.is_nccl_available():
        raise RuntimeError("this torch build has no NCCL; learners on CUDA need a CUDA build of torch")
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S)
    return dist.ProcessGroupNCCL(store, rank, world_size, options)


def gloo_group(store: RayStore, rank: int, world_size: int, host: str) -> Any:
    """A gloo process group of ``world_size`` ranks, bound to ``host`` (this node's address)."""
    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # private in torch, not in its stubs
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    options._timeout = datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S)
    return dist.ProcessGroupGloo(store, rank, world_size, options)


def _bytes(value: Any) -> bytes:
    """torch hands the store ``str`` or ``bytes``."""
    return value.encode() if isinstance(value, str) else bytes(value)
