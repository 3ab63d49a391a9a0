"""docs/testing.md's test file for each mode, run by pytest in a fresh process as a user's
project would run them: the fixtures come from the installed plugin alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.embedded import stop_everything

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "count"), [("test_fake.py", 6), ("test_inline.py", 2),
                                             ("test_real_server.py", 1)])
def test_the_guide_file_passes_under_pytest(name: str, count: int, tmp_path: Path) -> None:
    page = (ROOT / "docs" / "testing.md").read_text()
    (example,) = re.findall(rf"```python\n(# {re.escape(name)}\n.*?)```", page, re.DOTALL)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / name).write_text(example)
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    env["WURK_HOME"] = str(tmp_path / "home")
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "--rootdir", str(tmp_path), name], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=180)
    finally:  # the embedded server its session started stays up, as it would for a user
        stop_everything(tmp_path / "home")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{count} passed" in done.stdout
