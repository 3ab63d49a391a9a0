"""Bad flags and bad config for ``wurk worker``: one line naming the problem, exit 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wurk", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["worker", "-c", "0"], "Invalid value for '-c'"),
        (["worker", "-c", "many"], "'many' is not a valid integer"),
        # click 8.1 says "No such option: --bogus", later ones "No such option '--bogus'"
        (["worker", "--bogus"], "No such option:? '?--bogus"),
        (["worker", "-q", "a,x"], "weight 'x' is not a whole number"),
        (["worker", "-r", "no.such.module"], "no module named 'no'"),
        (["worker", "-r", "missing_file.py"], "file 'missing_file.py' does not exist"),
        (["worker", "-C", "/nonexistent/wurk.yml"], "cannot read config file"),
        (["-c", "0"], "Invalid value for '-c'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, result
    assert re.search(message, result.stderr), result.stderr  # each message, a pattern
    assert "Traceback" not in result.stderr


def test_bad_config_value_in_file(tmp_path: Path) -> None:
    config = tmp_path / "wurk.yml"
    config.write_text("timestamp_format: iso\n")
    result = run("worker", "-C", str(config))
    assert result.returncode == 2 and "timestamp_format must be" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_sidekiq_flags() -> None:
    result = run("worker", "--help")
    assert result.returncode == 0
    for flag in ("-r", "-q", "-c", "-t", "-C", "-e", "-g", "-v"):
        assert f"{flag}, " in result.stdout


def test_flags_win_over_the_file_and_the_file_over_wurk_concurrency(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """worker.md: defaults < ``WURK_CONCURRENCY`` < the ``-C`` file (its ``-e`` section over
    its top level) < flags; ``REDIS_URL`` wins over the file's ``redis_url``."""
    from wurk.cli.worker import build_config

    monkeypatch.setenv("WURK_CONCURRENCY", "3")
    monkeypatch.setenv("REDIS_URL", "redis://from-env:6379/0")
    path = tmp_path / "wurk.yml"
    path.write_text("concurrency: 7\ntimeout: 9\nqueues: [a]\nfetch: basic\n"
                    "redis_url: redis://from-file:6379/0\nproduction:\n  timeout: 11\n")
    assert build_config({})[0].concurrency == 3
    from_file, _ = build_config({"config_file": str(path)})
    assert (from_file.concurrency, from_file.timeout, from_file.queues, from_file.fetch) == (
        7, 9, ["a"], "basic")
    assert from_file.redis_url == "redis://from-env:6379/0"
    assert build_config({"config_file": str(path), "environment": "production"})[0].timeout \
        == 11
    from_flags, _ = build_config({"config_file": str(path), "environment": "production",
                                  "concurrency": 2, "timeout": 1.0, "queues": ("z",),
                                  "fetch": "reliable"})
    assert (from_flags.concurrency, from_flags.timeout, from_flags.queues, from_flags.fetch) \
        == (2, 1.0, ["z"], "reliable")


def test_debug_invocation_from_systemd_logs_at_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DEBUG_INVOCATION=1`` (systemd's restart in debug mode) is ``-v``."""
    from wurk.cli.worker import build_config

    monkeypatch.delenv("DEBUG_INVOCATION", raising=False)
    assert build_config({})[0].log_level == "INFO"
    monkeypatch.setenv("DEBUG_INVOCATION", "1")
    assert build_config({})[0].log_level == "DEBUG"
    monkeypatch.setenv("DEBUG_INVOCATION", "0")
    assert build_config({})[0].log_level == "INFO"
