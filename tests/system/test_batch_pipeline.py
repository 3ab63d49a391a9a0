"""The batch workflow the docs show: the file they quote runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "batch_pipeline.py"


def test_the_docs_quote_the_example_whole() -> None:
    page = (ROOT / "docs" / "batches.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    assert EXAMPLE.read_text() in blocks


def test_the_pipeline_runs_its_three_steps_in_order(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLE), "12"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^pipeline \w+: 12 pages, total 506$", done.stdout, re.MULTILINE)
