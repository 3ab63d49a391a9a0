"""``wurk top`` in a real terminal: tmux runs the installed command against a Redis holding
jobs in every state, at 80×24 and then (the window resized under it) at 200×60, and the
captured panes show every tab legible — its numbers, its rows, the keys at the bottom —
with nothing cut that a person needs; a retry's own screen too; ``q`` quits with 0.

Needs tmux (``apt-get install tmux``; ``.ci/run`` installs it): without it the test is
skipped, saying so. The tmux server is the test's own (``-L``, never a person's); teardown
kills it and, should it outlive that, the pane's process group (``wurk top``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import wurk

pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")

from tests.tui.world import seed

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(
    TMUX is None, reason="tmux is not installed (apt-get install tmux; .ci/run installs it): "
                         "wurk top's real-terminal test is SKIPPED")
WURK = str(Path(sys.executable).with_name("wurk"))
SIZES = [(80, 24), (200, 60)]
# What each tab must show, whatever the size: its numbers and the rows of the world.
TABS: list[tuple[str, list[str]]] = [
    ("1", ["Processed", "processed/s", "default", "critical", "paused", "clients"]),
    ("2", ["Processes 2", "host-a:101", "leader", "quiet", "Running jobs 3", "Export::Csv",
           "Video::Encode"]),
    ("3", ["Queues 2", "Enqueued 8", "critical", "paused", "default"]),
    ("4", ["Scheduled 2", "page 1 of 1", "Report::Nightly"]),
    ("5", ["Retries 3", "Import::Row", "Net::ReadTimeout"]),
    ("6", ["Dead 2", "Legacy::Sync", "NoMethodError"]),
    ("7", ["Metrics over the last 1h", "Import::Row", "Mail::Deliver", "<150ms", "<2.5s"]),
    ("8", ["Batches 1", "nightly import", "3 of 3"]),
    ("9", ["Periodic loops 1", "Per::Cleanup", "30 2 * * *"]),
]
# More room shows more of each row.
WIDE = {"2": ['run 2 · cursor {"offset": 500} · 12.5s iterating', '[1, "two"]'],
        "5": ["Net::ReadTimeout: read timed out 0"]}
# Each look at the pane runs a tmux client: a few a second is plenty for a person's pace.
LOOK_EVERY = 0.05
PATIENCE = 30.0
RESEND = 3.0


class Terminal:
    """A tmux server of the test's own with one window."""

    def __init__(self, name: str) -> None:
        self.socket = name
        self.width, self.height = SIZES[0]
        self.pane_pid: int | None = None

    def tmux(self, *args: str) -> str:
        found = subprocess.run([TMUX or "tmux", "-L", self.socket, *args], check=True,
                               capture_output=True, text=True, timeout=30)
        return found.stdout

    def start(self, command: str) -> None:
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", str(self.width),
                  "-y", str(self.height), command)
        self.pane_pid = int(self.tmux("display-message", "-p", "-t", "top",
                                      "#{pane_pid}").strip())

    def resize(self, width: int, height: int) -> None:
        self.tmux("resize-window", "-t", "top", "-x", str(width), "-y", str(height))
        self.width, self.height = width, height

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def stop(self) -> None:
        subprocess.run([TMUX or "tmux", "-L", self.socket, "kill-server"],
                       capture_output=True, timeout=30)
        if self.pane_pid is not None:  # the pane leads its own process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pane_pid, signal.SIGKILL)

    def wait(self, ok: Callable[[str], bool], what: str, *, again: str | None = None) -> str:
        """The pane's text once ``ok`` holds for it (a frame may be caught half drawn).
        ``again``: a key that goes to one place whatever the state (a tab's digit), sent
        again every ``RESEND`` seconds, as a person would press it again: a key that
        reaches the terminal while it answers Textual's queries can be lost (seen once
        in dozens of runs)."""
        deadline = time.monotonic() + PATIENCE
        resend = time.monotonic() + RESEND
        while True:
            screen = self.screen()
            if ok(screen):
                return screen
            now = time.monotonic()
            if now > deadline:
                raise AssertionError(f"timed out waiting for {what}; the pane:\n{screen}")
            if again is not None and now > resend:
                self.keys(again)
                resend = now + RESEND
            time.sleep(LOOK_EVERY)

    @staticmethod
    def on_job(screen: str) -> bool:
        """A job's own screen is in sight (its keys: Escape goes back)."""
        lines = screen.splitlines()
        return bool(lines) and "esc Back" in lines[-1]

    def to_retries(self, deadline: float) -> None:
        """The Retries tab in sight, from wherever the app is: Escape out of any screen
        opened, then the tab's digit; a key the pane does not answer in ``RESEND`` goes
        again (each is harmless twice: Escape on the tabs only clears a selection)."""
        retries_tab = self.legible("Retries 3  page 1 of 1", "Import::Row")
        while True:
            screen = self.screen()
            if retries_tab(screen):
                return
            assert time.monotonic() < deadline, (
                f"timed out waiting for the Retries tab; the pane:\n{screen}")
            key = "Escape" if self.on_job(screen) else "5"
            self.keys(key)
            time.sleep(0.2)  # Escape then a key at once would read as Alt+key
            resend = time.monotonic() + RESEND
            # (the masthead's clock aside: it changes every second)
            while time.monotonic() < resend and \
                    self.screen().splitlines()[1:] == screen.splitlines()[1:]:
                time.sleep(LOOK_EVERY)

    def legible(self, *texts: str) -> Callable[[str], bool]:
        """All of ``texts`` on screen, the whole height drawn, the keys on the last line."""
        def ok(screen: str) -> bool:
            lines = screen.splitlines()
            return all(text in screen for text in texts) and len(lines) == self.height \
                and "? Help" in lines[-1] and "q Quit" in lines[-1] \
                and all(len(line) <= self.width for line in lines)
        return ok


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    found = Terminal(f"wurk-top-{os.getpid()}")
    yield found
    found.stop()


# Some twenty looks at the pane, each bounded by PATIENCE: they decide, not the suite's 120 s
# a test (a run with load 15 on the 2 cores took longer than that and had its worker ended).
@pytest.mark.timeout(600)
def test_every_tab_is_legible_in_a_real_terminal(terminal: Terminal, config: wurk.Config,
                                                 tmp_path: Path) -> None:
    seed(config, redis.Redis.from_url(os.environ["REDIS_URL"]))
    env = " ".join(f"{name}={os.environ[name]}" for name in ("REDIS_URL", "WURK_HOME"))
    log = tmp_path / "top.log"
    # Textual draws on stderr: the terminal's, not a file's; the exit code goes to a file.
    # COLUMNS and LINES (the test process may have them) would win over the pane's size.
    # `timeout` ends it should the test die without a teardown (in the foreground: the
    # terminal's keys are its).
    terminal.start(f"env -u COLUMNS -u LINES TERM=xterm-256color {env} "
                   f"timeout --foreground -s KILL 300 {WURK} top --interval 1; "
                   f"echo exited $? >>{log}; sleep 30")
    first = terminal.wait(terminal.legible("updated", "Home", "Periodic"),
                          "wurk top to draw its first screen").splitlines()
    assert first[0].startswith(f" wurk top  Redis {config.redis_url}"), first[0]
    assert "Processed 1,234" in first[1] and "Failed 56" in first[1]
    for width, height in SIZES:
        if (width, height) != (terminal.width, terminal.height):
            terminal.resize(width, height)
        for key, texts in TABS:
            wanted = texts + (WIDE.get(key, []) if width >= 200 else [])
            terminal.keys(key)
            terminal.wait(terminal.legible(*wanted),
                          f"tab {key} at {width}x{height} to show {wanted}", again=key)
    # Enter opens the row under the cursor of the tab in sight. Under load the app can lag
    # seconds behind the keys, and a key can be lost: so nothing is sent on a guess. A job
    # screen still reading (its title says so) is waited for; Enter goes again only while the
    # tab stays in sight; any other screen is left with Escape, and the tab's digit sent again.
    own_screen = terminal.legible("Retries: Import::Row", "read timed out 0",
                                  "app/jobs/import_row.rb:12")
    deadline = time.monotonic() + PATIENCE
    while True:
        terminal.to_retries(deadline)
        terminal.keys("Enter")
        resend = time.monotonic() + RESEND
        while True:
            screen = terminal.screen()
            if own_screen(screen) or not ((Terminal.on_job(screen) and "Reading…" in screen)
                                          or time.monotonic() < resend):
                break
            assert time.monotonic() < deadline, (
                f"timed out waiting for a retry's own screen; the pane:\n{screen}")
            time.sleep(LOOK_EVERY)
        if own_screen(screen):
            break
    # Back on the tab (Escape again should it be lost, or should a lagging app have opened
    # the job twice).
    terminal.to_retries(time.monotonic() + PATIENCE)
    terminal.keys("q")
    deadline = time.monotonic() + PATIENCE
    while not (log.exists() and "exited" in log.read_text()):
        assert time.monotonic() < deadline, "wurk top did not quit on q"
        time.sleep(LOOK_EVERY)
    assert log.read_text().strip() == "exited 0"
