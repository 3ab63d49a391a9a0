"""A real uvicorn serving a dashboard app in a thread, and the system's headless Chromium.

The live stream cannot be tested through Starlette's TestClient (it waits for a response to
finish, and a stream never does), and the browser needs a real socket; both use this.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.types import ASGIApp

# The brief's launch flags: no sandbox (CI runs as root), nothing talking to the network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


class LiveServer:
    """uvicorn on a free loopback port, owned by the test that started it."""

    def __init__(self, app: ASGIApp) -> None:
        self.socket = socket.socket()
        # Accepted connections inherit this: without it a keep-alive response written as
        # headers then body waits out the client's delayed ACK (40 ms) under Nagle.
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1,
                                lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                       name="live-dashboard", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        self.thread.start()
        started = threading.Event()

        def check() -> None:
            if self.server.started:
                started.set()

        deadline = START_TIMEOUT
        while not started.wait(0.02) and deadline > 0:  # uvicorn offers no start event
            check()
            deadline -= 0.02
        if not self.server.started:
            raise AssertionError("the dashboard server did not start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(STOP_TIMEOUT)
        self.socket.close()
        assert not self.thread.is_alive(), "the dashboard server did not stop"


@contextmanager
def serve(app: ASGIApp) -> Iterator[LiveServer]:
    server = LiveServer(app).start()
    try:
        yield server
    finally:
        server.stop()


def chromium_path() -> str:
    """The system Chromium; in CI a missing one fails the test, elsewhere it skips it."""
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    message = "no Chromium binary (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: CI must run the browser tests")
    pytest.skip(message)


@contextmanager
def browser_context(*, extra_args: tuple[str, ...] = (), **options: Any) -> Iterator[Any]:
    """A headless Chromium with a new, empty profile directory (``extra_args`` appended to
    the launch flags)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with tempfile.TemporaryDirectory(prefix="wurk-chromium-") as profile, \
            sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True,
            args=[*CHROMIUM_ARGS, *extra_args], **options)
        try:
            yield context
        finally:
            context.close()


SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
