"""Where the user's code is: ``file:line`` of the innermost frame of the user's own code, which
every ``TraceError`` names.

Frames are sorted by the file their code is in (``code_kind``): msrl's core (the tracer), msrl's
other packages, the standard library and installed packages, and the user's code, which is
everything else.  The built-in algorithms (``algorithms/``) count as the user's: they are written as
users write theirs, and their graphs name their lines.  While msrl traces an algorithm, that
algorithm's own functions count as the user's wherever they are installed (``algorithm_code``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import sysconfig
import types
from collections.abc import Iterator
from typing import Literal

CodeKind = Literal["tracer", "msrl", "library", "user"]

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
"""msrl's core: the tracer and the API it records."""

_ROOT = os.path.dirname(os.path.dirname(PACKAGE_DIR))
_MSRL_DIRS = tuple(os.path.join(_ROOT, name, "") for name in ("msrl", "fragments", "policies", "cluster"))
"""msrl's own packages, wherever msrl is installed (a clone or site-packages)."""
_ALGORITHMS_DIR = os.path.join(_ROOT, "algorithms", "")
_LIBRARY_DIRS = tuple(
    {
        os.path.join(os.path.abspath(path), "")
        for key, path in sysconfig.get_paths().items()
        if key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
)
_ALGORITHM_CODE: list[frozenset[types.CodeType]] = []


@functools.cache
def code_kind(filename: str) -> CodeKind:
    """``tracer`` for msrl's core, ``msrl`` for msrl's other packages, ``library`` for the
    standard library and installed packages, ``user`` for everything else (``algorithms/`` too)."""
    if filename.startswith("<frozen "):
        return "library"
    path = os.path.abspath(filename)
    if os.path.dirname(path) == PACKAGE_DIR:
        return "tracer"
    if path.startswith(_ALGORITHMS_DIR):
        return "user"
    if path.startswith(_MSRL_DIRS):
        return "msrl"
    return "library" if path.startswith(_LIBRARY_DIRS) else "user"


def frame_kind(frame: types.FrameType) -> CodeKind:
    """``code_kind`` of ``frame``'s file, or ``user`` for the traced algorithm's own functions."""
    if _ALGORITHM_CODE and frame.f_code in _ALGORITHM_CODE[-1]:
        return "user"
    return code_kind(frame.f_code.co_filename)


@contextlib.contextmanager
def algorithm_code(cls: type) -> Iterator[None]:
    """While tracing ``cls``: its functions (``train_step``, helpers, properties, along its
    classes) are the user's code even where they are installed as a package."""
    codes = set()
    for klass in cls.__mro__:
        for attr in vars(klass).values():
            func = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
            if not isinstance(func, types.FunctionType):
                continue
            code = getattr(inspect.unwrap(func), "__code__", None)
            if isinstance(code, types.CodeType) and code_kind(code.co_filename) == "library":
                codes.add(code)
    _ALGORITHM_CODE.append(frozenset(codes))
    try:
        yield
    finally:
        _ALGORITHM_CODE.pop()


def user_frame(frame: types.FrameType | None) -> tuple[types.FrameType | None, types.FrameType | None]:
    """The innermost frame of user code at or outside ``frame``, and the function of msrl's
    packages or a library that the user's line called to get there (``numpy.clip`` for an
    error that ``np.clip(traced)`` raises): ``None`` where the user's line called the tracer."""
    callee = None
    while frame is not None:
        kind = frame_kind(frame)
        if kind == "user":
            return frame, callee
        callee = None if kind == "tracer" else frame
        frame = frame.f_back
    return None, None


def user_site() -> str:
    """``file:line`` of the innermost frame of the user's code: where a trace error points."""
    return format_site(user_frame(sys._getframe(1))[0])


def user_call() -> tuple[str, str | None]:
    """``user_site()``, and the qualified name of the function of msrl or a library that the
    user's line called on the way to the tracer (``numpy._core.fromnumeric.clip``), if any."""
    frame, callee = user_frame(sys._getframe(1))
    return format_site(frame), None if callee is None else function_name(callee)


def function_name(frame: types.FrameType) -> str:
    """``module.qualname`` of the function running in ``frame``."""
    code = frame.f_code
    return f"{frame.f_globals.get('__name__', '?')}.{getattr(code, 'co_qualname', code.co_name)}"  # 3.11+


def format_site(frame: types.FrameType | None) -> str:
    """``file:line`` of ``frame``."""
    if frame is None:
        return "<unknown>"
    return format_location(frame.f_code.co_filename, frame.f_lineno)


def format_location(path: str, line: int | None) -> str:
    """``path:line``, the path relative to the working directory when it is below it."""
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{line}"
