"""Bad flags and bad ``swarm:`` settings for ``wurk swarm``: one line naming them, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.system.conftest import ROOT


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wurk", "swarm", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0"], "Invalid value for '-n'"),
        (["--max-memory", "-5"], "Invalid value for '--max-memory'"),
        (["--max-jobs", "many"], "'many' is not a valid integer"),
        (["-c", "0"], "Invalid value for '-c'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("swarm: {children: 2}", "unknown swarm setting 'children'"),
        ("swarm: {count: 0}", "swarm count must be a whole number of at least 1, not 0"),
        ("swarm: [4]", "swarm must be a mapping"),
        ("swarm: {tick: .nan}", "swarm tick must be a number of seconds > 0, not nan"),
    ],
)
def test_bad_swarm_section_exits_2(tmp_path: Path, section: str, message: str) -> None:
    config = tmp_path / "wurk.yml"
    config.write_text(section + "\n")
    result = run("-C", str(config))
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("text", ["lots", "inf"])
def test_bad_count_in_the_environment_exits_2(text: str) -> None:
    result = run(env={"WURK_COUNT": text})
    assert result.returncode == 2 and f"WURK_COUNT='{text}' is not a number" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_swarm_and_worker_flags() -> None:
    result = run("--help")
    assert result.returncode == 0
    for flag in ("-n, --count", "--max-memory", "--max-jobs", "-r, --require", "-t, --timeout"):
        assert flag in result.stdout
