"""Every ```python block of README.md runs as written, as a reader would paste it into a file: each
in a fresh interpreter (a subprocess, with a timeout), from a temporary directory that holds the
run directories it writes and a link to the repository's ``configs/``, as the reader's clone has it.
The suite's environment goes with it (``MSRL_COMPILE=false``, from tests/conftest.py).

A block that defines an ``msrl.Algorithm`` is meant to be run by config: besides running the block
as a script (which traces it), the same interpreter trains it by config (``algorithm: module:Class``)
for one iteration and its evaluation, a whole run through msrl's run loop.  A ``print(...)`` whose
comment is a literal (``# {...}``) must print that literal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import REPO, explain

README = REPO / "README.md"
TIMEOUT_S = 120
"""A block that runs longer is stuck: each takes a few seconds (mostly imports) on a 2-core machine."""

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)
_ALGORITHM = re.compile(r"^class (\w+)\(msrl\.Algorithm\):", re.MULTILINE)
_PRINTED = re.compile(r"^print\(.*\)  # (\{.*\})$", re.MULTILINE)


def readme_blocks() -> list[tuple[str, str]]:
    """(the heading it sits under, the code) of every ```python block of README.md, in order."""
    text = README.read_text()
    blocks = []
    for match in _BLOCK.finditer(text):
        heading = [h.group(1) for h in _HEADING.finditer(text, 0, match.start())][-1]
        blocks.append((heading, match.group(1)))
    return blocks


BLOCKS = readme_blocks()


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 4, [heading for heading, _ in BLOCKS]


def _driver(module: str, code: str) -> str:
    """What the subprocess runs: the block as ``__main__``, then, for an algorithm, a short run by config."""
    lines = ["import runpy", f"runpy.run_path({module + '.py'!r}, run_name='__main__')"]
    for cls in _ALGORITHM.findall(code):
        config = {
            "name": cls.lower(),
            "algorithm": f"{module}:{cls}",
            "total_env_steps": 1,  # the first iteration reaches it
            "eval_episodes": 2,
            "progress": False,
        }
        lines += [
            "import msrl",
            f"run = msrl.train({config!r})",
            "assert run.iterations == 1 and run.evaluation is not None, (run.iterations, run.evaluation)",
            f"print('trained by config:', {cls!r}, run.run_dir)",
        ]
    return "\n".join(lines)


@pytest.mark.parametrize(
    "index",
    range(len(BLOCKS)),
    ids=[f"{i}-{re.sub(r'[^a-z]+', '_', h.lower()).strip('_')}" for i, (h, _) in enumerate(BLOCKS)],
)
def test_readme_python_block_runs_as_written(index, tmp_path: Path):
    heading, code = BLOCKS[index]
    module = f"readme_block_{index}"
    (tmp_path / f"{module}.py").write_text(code)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    assert env["MSRL_COMPILE"] == "false"
    result = subprocess.run(
        [sys.executable, "-c", _driver(module, code)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, f"README block under {heading!r}:\n{explain(result)}"
    for printed in _PRINTED.findall(code):
        assert printed in result.stdout, (printed, result.stdout)
    for cls in _ALGORITHM.findall(code):
        assert f"trained by config: {cls} " in result.stdout, explain(result)
