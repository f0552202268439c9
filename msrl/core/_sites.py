"""Where the user's code is: ``file:line`` of the innermost frame outside msrl's core,
which every ``TraceError`` names."""

from __future__ import annotations

import os
import sys
import types

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
"""msrl's core: its frames are skipped when looking for the user's line."""


def user_site() -> str:
    """``file:line`` of the innermost frame outside msrl's own package: the user's code."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == PACKAGE_DIR:
        frame = frame.f_back
    return format_site(frame)


def format_site(frame: types.FrameType | None) -> str:
    """``file:line`` of ``frame``, relative to the working directory when it is below it."""
    if frame is None:
        return "<unknown>"
    path = frame.f_code.co_filename
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{frame.f_lineno}"
