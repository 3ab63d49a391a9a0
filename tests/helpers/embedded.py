"""Fixtures for tests of the embedded server: a private WURK_HOME without REDIS_URL, and a
finalizer that leaves no server process behind whatever the test did to its files."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from wurk.connections.server import EmbeddedServer


def servers_in(home: Path) -> list[psutil.Process]:
    """Server processes working in ``home`` (the server chdirs into its data directory)."""
    target = os.path.realpath(home)
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if "valkey" in (process.info["name"] or "") and process.cwd() == target:
                found.append(process)
        except psutil.Error:
            continue
    return found


def stop_everything(home: Path) -> None:
    for process in servers_in(home):
        try:
            process.send_signal(signal.SIGCONT)  # a test may have frozen it
        except psutil.Error:
            continue
    with contextlib.suppress(Exception):  # what a test left broken is killed below
        EmbeddedServer(home, stop_timeout=2.0).stop()
    for process in servers_in(home):
        process.kill()
        process.wait(5)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh WURK_HOME; REDIS_URL (set by the harness) removed so wurk goes embedded."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("WURK_SERVER_BINARY", raising=False)
    path = tmp_path / "wurk-home"
    monkeypatch.setenv("WURK_HOME", str(path))
    yield path
    stop_everything(path)
    assert servers_in(path) == []
