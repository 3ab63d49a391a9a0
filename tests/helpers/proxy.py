"""A fault-injection TCP proxy between wurk and a real Redis-protocol server (tests only).

1. ``FaultProxy(upstream_port)`` listens on a free loopback port and forwards every
   connection to the server; ``url`` is what a client or worker is given instead.
2. Faults on command, for the connections that exist and those to come:
   ``latency(s)`` delays every chunk by ``s`` in each direction; ``drop()`` resets new
   connections at once (a refused server, counted in ``accepted``); ``cut()`` resets every
   open connection now — a reply on its way is lost, as on a real network cut;
   ``blackhole()`` accepts new connections and forwards nothing anywhere: bytes wait, as
   TCP's do in a partition, until ``restore()`` (clients see their timeouts);
   ``retarget(port)`` sends new connections to another server (a failover behind a VIP).
   ``sever()`` makes every open connection half-open: the server's side is closed (it
   forgets the client), the client's is kept and hears nothing, no reset — as when a
   network or a server drops a connection silently; new connections are fine.
   ``restore()`` ends every fault.
3. Threads: one accepting, two per connection (one per direction), all owned here; every
   blocking call has a timeout; ``close()`` stops them all and joins them.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

__all__ = ["FaultProxy"]

# How long a thread blocks before looking at the proxy's state again: bounds how long a
# fault takes to apply and close() to finish.
POLL_SECONDS = 0.05
# A send stuck this long means the other side stopped reading: the link is closed.
SEND_TIMEOUT = 10.0
CONNECT_TIMEOUT = 2.0
CHUNK = 65536
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN

NORMAL, DROP, BLACKHOLE = "normal", "drop", "blackhole"


def _reset(sock: socket.socket) -> None:
    """Close at once with a reset: the peer's next read or write fails immediately."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    with suppress(OSError):
        sock.close()


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.upstream: socket.socket | None = None
        self.closed = threading.Event()
        self.threads: list[threading.Thread] = []

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        _reset(self.client)
        if self.upstream is not None:
            _reset(self.upstream)


class FaultProxy:
    """Loopback TCP proxy with latency, drop, cut, blackhole and retarget on command."""

    def __init__(self, upstream_port: int, *, port: int = 0) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self._listener.settimeout(POLL_SECONDS)
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0  # connections accepted, refused ones included: client attempts
        self._mode = NORMAL
        self._latency = 0.0
        self._state = threading.Condition()
        self._links: set[_Link] = set()
        self._severed: list[socket.socket] = []  # client sides kept open by sever()
        self._closing = threading.Event()
        self._acceptor = threading.Thread(target=self._accept_loop, name="proxy-accept",
                                          daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._acceptor.start()
        return self

    def close(self) -> None:
        self._closing.set()
        with self._state:
            self._state.notify_all()
        self._acceptor.join(timeout=5)
        self._listener.close()
        for link in self._take_links():
            link.close()
            for thread in self._joined(link):
                thread.join(timeout=5)
        with self._state:
            severed, self._severed = self._severed, []
        for sock in severed:
            _reset(sock)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults -----------------------------------------------------------------------------
    def latency(self, seconds: float) -> None:
        with self._state:
            self._latency = seconds

    def drop(self) -> None:
        """Reset new connections at once (existing ones are left alone)."""
        self._set_mode(DROP)

    def blackhole(self) -> None:
        """Accept new connections; forward nothing, on any connection, until ``restore``."""
        self._set_mode(BLACKHOLE)

    def cut(self) -> int:
        """Reset every open connection now; returns how many were cut."""
        links = self._take_links()
        for link in links:
            link.close()
        return len(links)

    def sever(self) -> int:
        """Make every open connection half-open now; returns how many. Their pumps stop,
        the upstream side is closed, the client side stays open (closed by ``close``)."""
        links = self._take_links()
        for link in links:
            with self._state:
                self._severed.append(link.client)
            link.closed.set()  # the pumps stop forwarding; close() leaves the client alone
            if link.upstream is not None:
                with suppress(OSError):
                    link.upstream.close()
        for link in links:
            for thread in self._joined(link):
                thread.join(timeout=5)
        return len(links)

    def retarget(self, upstream_port: int) -> None:
        with self._state:
            self.upstream_port = upstream_port

    def restore(self) -> None:
        with self._state:
            self._mode = NORMAL
            self._latency = 0.0
            self._state.notify_all()

    @contextmanager
    def outage(self, kind: str = DROP) -> Iterator[None]:
        """``with proxy.outage():`` Redis unreachable inside the block (cut + drop)."""
        self._set_mode(kind)
        self.cut()
        try:
            yield
        finally:
            self.restore()

    @property
    def open_connections(self) -> int:
        with self._state:
            return len(self._links)

    def _set_mode(self, mode: str) -> None:
        with self._state:
            self._mode = mode
            self._state.notify_all()

    def _joined(self, link: _Link) -> list[threading.Thread]:
        """``link``'s threads, every one of them started."""
        with self._state:
            return list(link.threads)

    def _take_links(self) -> list[_Link]:
        with self._state:
            links = list(self._links)
            self._links.clear()
        return links

    # -- threads ----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            self._admit(client)

    def _admit(self, client: socket.socket) -> None:
        with self._state:
            self.accepted += 1
            mode = self._mode
        if mode == DROP:
            _reset(client)
            return
        client.settimeout(SEND_TIMEOUT)
        link = _Link(client)
        opener = threading.Thread(target=self._open, args=(link,), name="proxy-link",
                                  daemon=True)
        # A thread is listed and started under the lock that ``_joined`` reads the list
        # under: a sever() right after the accept once joined a thread not started yet.
        with self._state:
            self._links.add(link)
            link.threads.append(opener)
            opener.start()

    def _open(self, link: _Link) -> None:
        """Connect upstream (once no blackhole is in the way), then pump both directions."""
        if not self._wait_forwarding(link):
            return
        with self._state:
            port = self.upstream_port
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT)
        except OSError:
            self._forget(link)
            return
        upstream.settimeout(SEND_TIMEOUT)
        link.upstream = upstream
        if link.closed.is_set():  # cut while connecting
            _reset(upstream)
            return
        back = threading.Thread(target=self._pump, args=(link, upstream, link.client),
                                name="proxy-pump", daemon=True)
        with self._state:
            link.threads.append(back)
            back.start()
        self._pump(link, link.client, upstream)

    def _wait_forwarding(self, link: _Link) -> bool:
        """Wait while blackholed; False when the link or the proxy closed meanwhile."""
        with self._state:
            while self._mode == BLACKHOLE:
                if link.closed.is_set() or self._closing.is_set():
                    return False
                self._state.wait(POLL_SECONDS)
        return not link.closed.is_set() and not self._closing.is_set()

    def _pump(self, link: _Link, source: socket.socket, target: socket.socket) -> None:
        try:
            poller = select.poll()
            poller.register(source, select.POLLIN)
            while not link.closed.is_set() and not self._closing.is_set():
                if not poller.poll(POLL_SECONDS * 1000) or not self._wait_forwarding(link):
                    continue
                data = source.recv(CHUNK)
                if not data:
                    break
                self._delay(link)
                target.sendall(data)
        except (OSError, ValueError):
            pass  # reset by a cut (a closed socket's descriptor is -1), or by the other side
        finally:
            self._forget(link)

    def _delay(self, link: _Link) -> None:
        with self._state:
            latency = self._latency
        if latency > 0:
            link.closed.wait(latency)  # a cut or close ends the wait

    def _forget(self, link: _Link) -> None:
        with self._state:
            self._links.discard(link)
        link.close()
