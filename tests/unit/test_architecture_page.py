"""docs/architecture.md points readers at the code: every file path it writes in backticks, and every
link it makes inside the repository, names something that exists, so a renamed or removed file
fails here instead of leaving the page wrong."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "architecture.md"

SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".h", ".md", ".toml", ".sh")
"""A backticked name without a slash is a file when it ends in one of these (``_base.py``); other
dotted names are Python names (``msrl.envs``) or files a run writes (``metrics.jsonl``)."""
NOT_A_PATH = re.compile(r"[\s<>*~$(),=\"']|^https?:|^-")
"""Spans that are no path of the repository: templates (``runs/<name>/``), globs, home
directories, calls, commands and URLs."""


def inline_code(markdown: str) -> list[str]:
    """The text of every inline code span, fenced code blocks left out."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.DOTALL | re.MULTILINE)
    return re.findall(r"`([^`\n]+)`", prose)


def cited_paths(markdown: str) -> tuple[list[str], list[str]]:
    """``(paths, names)``: spans that are paths from the repository's root (they hold a slash), and
    bare file names (``_episodes.py``), which must exist somewhere in the repository."""
    paths, names = [], []
    for span in inline_code(markdown):
        if NOT_A_PATH.search(span):
            continue
        if "/" in span:
            paths.append(span)
        elif span.endswith(SOURCE_SUFFIXES) and not span.startswith("."):  # ``.cu`` is a kind of file
            names.append(span)
    return paths, names


def file_names(root: Path) -> set[str]:
    """The names of the files under ``root``, leaving out hidden folders (``.git``, ``.venv``) and
    what runs and builds leave behind."""
    names: set[str] = set()
    for _, folders, files in os.walk(root):
        folders[:] = [f for f in folders if not f.startswith(".") and f not in ("runs", "build", "__pycache__")]
        names.update(files)
    return names


def missing(markdown: str, root: Path) -> list[str]:
    """The cited paths, bare file names and relative links of ``markdown`` (a page in ``docs/``
    of the repository at ``root``) that name nothing there."""
    paths, names = cited_paths(markdown)
    files = file_names(root)
    gone = [path for path in paths if not (root / path).exists()]
    gone += [name for name in names if name not in files]
    links = [target for target in re.findall(r"\]\(([^)#\s]+)", markdown) if not re.match(r"https?:", target)]
    gone += [link for link in links if not (root / "docs" / link).exists()]
    return gone


def test_every_path_the_page_cites_exists():
    markdown = PAGE.read_text()
    paths, names = cited_paths(markdown)
    assert len(paths) >= 40 and len(names) >= 5, (paths, names)  # the page cites the code it describes
    assert missing(markdown, REPO) == []


def test_a_path_that_does_not_exist_is_found(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "msrl").mkdir()
    (tmp_path / "msrl" / "_real.py").write_text("")
    page = (
        "See `msrl/_real.py`, `msrl/_gone.py` and `_real.py`, `_lost.py`; not `msrl.envs` or `runs/<name>/`.\n"
        "```\nmsrl/_in_a_block.py\n```\n"
        "[here](../msrl/_real.py) and [there](../msrl/_away.py)\n"
    )
    assert missing(page, tmp_path) == ["msrl/_gone.py", "_lost.py", "../msrl/_away.py"]
