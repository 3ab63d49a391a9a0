"""``wurk top`` as a command: listed, its flags, and what it checks before drawing anything
(a terminal, a Redis that answers), each failure one line and exit 1. The command in a
real terminal is ``tests/system/test_tui_tmux.py``'s."""

from __future__ import annotations

import sys

import pytest

from wurk.cli import run


def test_top_is_a_command_with_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    assert "top" in capsys.readouterr().out
    assert run(["top", "--help"]) == 0
    usage = capsys.readouterr().out
    for flag in ("-C, --config", "-e, --environment", "--read-only", "--interval"):
        assert flag in usage, flag
    assert run(["top", "--interval", "0.1"]) == 2  # faster than Redis should be asked
    assert "0.5<=x<=3600" in capsys.readouterr().err


def test_without_a_terminal_it_says_what_to_use_instead(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert not sys.stdin.isatty()  # pytest's
    assert run(["top"]) == 1
    err = capsys.readouterr().err
    assert "wurk top needs a terminal" in err and "wurk stats" in err


def test_a_redis_out_of_reach_is_one_line_before_anything_is_drawn(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # without Textual the extra is what is missing, said first (the other tests need none)
    pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert run(["top"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "127.0.0.1:9" in err and err.count("\n") == 1
