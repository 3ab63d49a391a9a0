"""``wurk top`` as a command: listed, its flags, and what it checks before drawing anything
(a terminal, a Redis that answers), each failure one line and exit 1. The command in a
real terminal is ``tests/system/test_tui_tmux.py``'s."""

from __future__ import annotations

import sys
from pathlib import Path

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


def _a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)


def test_with_stderr_redirected_it_refuses_as_well(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """tui.md: "No terminal (stdin or stderr redirected …)": a terminal on stdin is not
    enough, since the screen is drawn on stderr."""
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert not sys.stderr.isatty()  # pytest's capture
    assert run(["top"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: wurk top needs a terminal") and err.count("\n") == 1
    assert "wurk stats" in err and "--json" in err


class NoTextual:
    """An import finder for which Textual is not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "textual" or name.startswith("textual."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_without_textual_it_names_the_extra_and_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _a_terminal(monkeypatch)
    for name in [name for name in sys.modules if name == "wurk.tui" or
                 name.startswith(("wurk.tui.", "textual.")) or name == "textual"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NoTextual(), *sys.meta_path])
    assert run(["top"]) == 1
    assert capsys.readouterr().err == ("Error: wurk top needs the tui extra (textual is "
                                       "missing): pip install 'wurk[tui]'\n")


def test_where_no_server_runs_it_says_so_and_starts_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """tui.md: it "never starts the embedded server: where none runs it says so and exits
    1, as `wurk stats` does"."""
    pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")
    _a_terminal(monkeypatch)
    home = tmp_path / ".wurk"
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.setenv("WURK_HOME", str(home))
    assert run(["top"]) == 1
    assert capsys.readouterr().err == (
        f"Error: no wurk server here (none runs at {home}); start one with `wurk server "
        "start` or set REDIS_URL\n")
    assert not home.exists()


def test_it_refreshes_every_two_seconds_unless_told(
        config: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """tui.md: "`--interval` sets the refresh (2 s by default, 0.5 s at the fastest)"."""
    pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")
    from wurk.tui import TopApp

    _a_terminal(monkeypatch)
    intervals: list[float] = []
    monkeypatch.setattr(TopApp, "run", lambda app, *a, **k: intervals.append(app.interval))
    assert run(["top"]) == 0
    assert run(["top", "--interval", "0.5"]) == 0
    assert intervals == [2.0, 0.5]
