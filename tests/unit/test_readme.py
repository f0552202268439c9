"""What a newcomer meets first in README.md: a quick start of two set-up commands that says how to
reach the ``msrl`` command afterwards, as ``make train`` itself does, and references that stay in
the repository and reach every page of docs/.  (The README's Python blocks run in
tests/e2e/test_readme_examples.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def quick_start() -> str:
    """The README's "Quick start" section, up to the next heading."""
    match = re.search(r"^## Quick start\n(.*?)^## ", README, re.DOTALL | re.MULTILINE)
    assert match is not None, "README.md has no '## Quick start' section"
    return match.group(1)


def test_quick_start_has_two_set_up_commands_then_says_how_to_reach_msrl():
    section = quick_start()
    first = re.search(r"^```bash\n(.*?)^```\n\n(.*?)\n\n", section, re.DOTALL | re.MULTILINE)
    assert first is not None, section
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert [c for c in commands if c] == ["make train", "make test"]
    after = first.group(2)  # the paragraph right after the two commands
    assert "source .venv/bin/activate" in after and ".venv/bin/msrl" in after, after


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_train_ends_by_saying_how_to_reach_msrl():
    # -n prints the recipe without running it (no venv is made, nothing is trained); run from a
    # make (CI's `make test`), the inner make would add its directory lines, which are not the recipe.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    recipe = subprocess.run(
        ["make", "-n", "--no-print-directory", "train"], cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout
    lines = recipe.strip().splitlines()
    train = next(i for i, line in enumerate(lines) if "/bin/msrl train " in line)
    told = " ".join(lines[train + 1 :])
    assert lines[train + 1 :] and all(line.startswith("echo ") for line in lines[train + 1 :]), lines
    assert "source .venv/bin/activate" in told and ".venv/bin/msrl" in told, told


def test_references_stay_inside_the_repository():
    # A reader of a clone has only the repository: a path above it names nothing they have.
    outside = [line for line in README.splitlines() if re.search(r"(\]\(|`|\s)\.\./", line)]
    assert outside == []


def test_every_docs_page_is_linked():
    pages = sorted([*REPO.glob("docs/*.md"), *REPO.glob("docs/*/README.md")])
    assert pages
    linked = set(re.findall(r"\]\(([^)#]+)", README))
    assert [p.relative_to(REPO).as_posix() for p in pages if p.relative_to(REPO).as_posix() not in linked] == []
