"""Examples the docs give as whole files run as written, as a user would run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_testing_guide_example_passes_under_pytest(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "testing.md").read_text()
    (example,) = re.findall(r"```python\n(# test_welcome\.py\n.*?)```", page, re.DOTALL)
    project = tmp_path / "proj"
    (project / "tests").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    (project / "tests" / "test_welcome.py").write_text(example)
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "WURK_HOME")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # a bare pytest, as in a fresh project
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(project), "tests"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
    assert not (project / ".wurk").exists()  # the example's server lived in its tmp_path
