"""A stand-in Redis node for tests of what wurk makes of a node's answers: a TCP server that
answers every command it reads with what ``reply`` says.

Commands are parsed off the stream (hiredis), not taken one a read: redis-py 8.2 sends the
tail of its connection handshake (``CLIENT SETINFO`` twice) in one write, and a stand-in
answering once a read left the client waiting for the second reply."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import hiredis

# What a RESP3 ``HELLO`` is answered with: the protocol version, all a client checks.
HELLO = b"%1\r\n$5\r\nproto\r\n:3\r\n"
OK = b"+OK\r\n"


def handshake_or(answer: Callable[[list[bytes]], bytes | None]) -> Callable[[list[bytes]], bytes]:
    """``answer`` for the commands it knows (it returns None for the others), HELLO's answer
    to HELLO and +OK to the rest of the handshake (CLIENT SETINFO, SELECT)."""
    def reply(command: list[bytes]) -> bytes:
        known = answer(command)
        if known is not None:
            return known
        return HELLO if command[0].upper() == b"HELLO" else OK
    return reply


@contextmanager
def fake_node(reply: Callable[[list[bytes]], bytes]) -> Iterator[int]:
    """A node on a free port of 127.0.0.1 answering each command with ``reply(command)``
    (the command's words as bytes); yields its port, shut down on leaving."""
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            reader = hiredis.Reader()
            while data := self.request.recv(4096):
                reader.feed(data)
                while (command := reader.gets()) is not False:
                    self.request.sendall(reply(command))

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True,
                         name="fake-redis-node").start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
