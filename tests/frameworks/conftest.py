"""Helpers for the framework examples: each runs as its users run it, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(directory: Path, args: list[str], *, env: dict[str, str],
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def example_env(redis_server: object, tmp_path: Path) -> dict[str, str]:
    """The harness's REDIS_URL, data in a temporary directory, no bytecode in the tree."""
    env = dict(os.environ)
    env["SHOP_DATA_DIR"] = str(tmp_path)
    env["WURK_HOME"] = str(tmp_path / "wurk-home")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
