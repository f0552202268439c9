"""The program of a build process (``msrl.rl._aot.Build``): it builds one compiled region's package.

Run as ``python _build_process.py PACKAGE LOG`` with its request (the traced graph and the layout of
its arguments, pickled by the run that started it) on standard input.  Builds on one machine take
turns: each waits for an exclusive lock on a file beside the packages before it imports torch, so
the builds queued behind one cost little memory, and one that finds its package already built
(by another run, meanwhile) stops there.  Its output goes to LOG, which it removes once the
package is built: a log left behind is a failed build's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

_PARTIAL = "partial-"
"""The prefix of a package being written, moved to its name once whole."""


@contextlib.contextmanager
def _turn(directory: Path) -> Iterator[None]:
    """This machine's builds one at a time: an exclusive lock on a file beside the packages."""
    with open(directory / "build.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(path: Path, payload: bytes) -> None:
    """Export the traced graph of ``payload`` and build its package, written atomically to ``path``."""
    with _turn(path.parent):
        for stale in path.parent.glob(f"{_PARTIAL}*.pt2"):  # only the lock's holder writes these: a killed build's
            stale.unlink(missing_ok=True)
        if path.exists():
            return
        import pickle

        import torch
        from torch._inductor import aoti_compile_and_package

        request = pickle.loads(payload)  # written by the run that started this process, through its pipe
        torch.set_num_threads(request["threads"])  # the generated code is specialised on it
        leaves = [
            torch.empty_strided(shape, stride, dtype=dtype, device=device)
            for shape, stride, dtype, device in request["leaves"]
        ]
        program = torch.export.export(request["graph"], tuple(leaves), strict=False)
        fd, partial = tempfile.mkstemp(prefix=_PARTIAL, suffix=".pt2", dir=path.parent)
        os.close(fd)
        try:
            with warnings.catch_warnings():
                # torch deep-copies the exported graph's pytree specs here and warns that its own
                # LeafSpec is deprecated: nothing msrl can change, and the log is what a failed
                # build's reason is read from, so only that warning is left out of it
                warnings.filterwarnings(
                    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
                )
                aoti_compile_and_package(program, package_path=partial)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)


def yield_to_training() -> None:
    """Run only on cores nothing else wants (Linux's idle scheduling class, inherited by the C++
    compiler this process starts; elsewhere the lowest priority).  A training run on every core
    keeps torch's threads busy, and a thread of theirs that this build displaced would hold up every
    parallel operation of the run while it waits for its core: the build waits instead."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def main() -> None:
    payload = sys.stdin.buffer.read()  # all of it first: the run's write must not wait on the lock
    if os.environ.get("MSRL_BUILD_PRIORITY") == "idle":
        yield_to_training()
    build(Path(sys.argv[1]), payload)
    Path(sys.argv[2]).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
