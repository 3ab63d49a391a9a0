"""systemd's end of the notify protocol, for a test: a real AF_UNIX datagram socket.

``NotifySocket`` binds a socket in a short temporary folder (a socket path is limited to
108 bytes; pytest's ``tmp_path`` can be longer) or in the abstract namespace, asks the
kernel for each sender's credentials (``SO_PASSCRED``), and keeps every datagram it
reads as a ``Datagram``: the sender's pid and its ``FIELD=value`` lines. Its ``env`` is
what a process started under it gets (``NOTIFY_SOCKET``).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Datagram", "NotifySocket", "unreachable"]

_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class Datagram:
    pid: int
    fields: tuple[str, ...]
    at: float  # monotonic time it was read

    def has(self, field: str) -> bool:
        return field in self.fields


class NotifySocket:
    def __init__(self, *, abstract: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._folder: Path | None = None
        if abstract:
            name = f"wurk-test-notify-{uuid.uuid4().hex}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self._folder = Path(tempfile.mkdtemp(prefix="wurk-sd-"))
            path = self._folder / "notify"
            self.sock.bind(str(path))
            self.address = str(path)
        self.received: list[Datagram] = []

    @property
    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.address}

    def _read(self, timeout: float) -> None:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data, ancillary, _, _ = self.sock.recvmsg(
                4096, socket.CMSG_SPACE(_CREDENTIALS.size))
        except TimeoutError:
            return
        pid = 0
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = _CREDENTIALS.unpack(payload[:_CREDENTIALS.size])[0]
        self.received.append(Datagram(pid, tuple(data.decode().split("\n")),
                                      time.monotonic()))

    def wait_for(self, predicate: Callable[[list[Datagram]], bool], timeout: float = 20.0,
                 what: str = "datagrams") -> list[Datagram]:
        """Read until ``predicate(every datagram so far)`` holds; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not predicate(self.received):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what}; got {self.received}")
            self._read(min(remaining, 0.2))
        return self.received

    def first(self, field: str, timeout: float = 20.0) -> Datagram:
        """The first datagram carrying ``field``, waited for."""
        self.wait_for(lambda got: any(d.has(field) for d in got), timeout, field)
        return next(d for d in self.received if d.has(field))

    def read_for(self, seconds: float) -> list[Datagram]:
        """Everything that arrives within ``seconds``."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self._read(remaining)
        return self.received

    def with_field(self, field: str) -> list[Datagram]:
        return [d for d in self.received if d.has(field)]

    def close(self) -> None:
        self.sock.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> NotifySocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unreachable() -> str:
    """A socket path no one listens on (its folder does not exist)."""
    return os.path.join(tempfile.gettempdir(), f"wurk-no-such-{uuid.uuid4().hex}", "notify")
