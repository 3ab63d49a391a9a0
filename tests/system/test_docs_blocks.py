"""Every ```python block of README.md and docs/ is run, or says why it is not.

The convention, an HTML comment on the line right before the block:

- none: the block is a whole program. This test saves it as ``example.py`` in a temporary
  project and runs ``python example.py`` against the test server; it must exit 0.
- ``<!-- fragment -->``: a piece of a larger program (a settings file, a view, an
  ``async def`` body); it is not run.
- ``<!-- run by tests/…/test_x.py -->``: a test runs it where it belongs (pasted into a
  Django project, say); that file must exist and read this page.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.system.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"^<!-- (.*) -->$")
FRAGMENT = "fragment"
RUN_BY = re.compile(r"^run by (tests/[\w/]+\.py)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    marker: str | None
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[:match.start()].splitlines()
            marked = _MARKER.match(before[-1]) if before else None
            found.append(Block(page, line, marked.group(1) if marked else None,
                               match.group(1)))
    return found


BLOCKS = blocks()


def test_every_marker_stands_right_before_a_python_block() -> None:
    """A marker that lost its block (the block moved or became ```sh) marks nothing."""
    stray = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            marked = _MARKER.match(line)
            if marked and (marked.group(1) == FRAGMENT or RUN_BY.match(marked.group(1))) and (
                    number == len(lines) or lines[number] != "```python"):
                stray.append(f"{page.relative_to(ROOT)}:{number}")
    assert stray == []


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker is not None],
                         ids=lambda b: b.name)
def test_a_marked_block_is_a_fragment_or_names_the_test_that_runs_it(block: Block) -> None:
    if block.marker == FRAGMENT:
        return
    run_by = RUN_BY.match(block.marker or "")
    assert run_by is not None, f"{block.name}: unknown marker {block.marker!r}"
    runner = ROOT / run_by.group(1)
    assert runner.is_file(), f"{block.name}: {run_by.group(1)} does not exist"
    assert str(block.page.relative_to(ROOT)) in runner.read_text(encoding="utf-8"), (
        f"{block.name}: {run_by.group(1)} does not read {block.page.name}")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker is None],
                         ids=lambda b: b.name)
def test_an_unmarked_block_runs_as_pasted(block: Block, tmp_path: Path,
                                          r: redis.Redis) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (project / "example.py").write_text(block.code)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)  # what a user has: the installed wurk, not this checkout's tests
    done = subprocess.run([sys.executable, "-c", "import example"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, (
        f"{block.name} does not run as pasted (mark it <!-- fragment --> if it is a piece):"
        f"\n{done.stdout}\n{done.stderr}")
