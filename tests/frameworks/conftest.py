"""Helpers for the framework examples: each runs as its users run it, in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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


def load_example(path: Path) -> ModuleType:
    """Import an example app's module by file, once per test session."""
    name = path.stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
