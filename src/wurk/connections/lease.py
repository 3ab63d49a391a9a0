"""A lease: one connection held by one thread across many commands, spoken to directly.

1. ``Lease.call`` sends one command and reads its reply; ``send`` writes commands whose
   replies the next ``pipeline`` reads first; ``pipeline`` sends several in one round trip.
2. Commands are packed by hiredis and written straight to the socket, and replies read off
   it by a hiredis reader of the lease's own, without redis-py's command, connection and
   parser layers, which cost more CPU than the round trip on the fetch path. Error replies
   become the exceptions redis-py would raise (its own parser makes them).
3. Nothing is ever replayed: a connection gone out of step (broken, or a command cut short
   between request and reply) is dropped and the next call takes a fresh one.
4. A failover reply (on a cluster, ``MOVED`` and ``ASK`` too) retires this connection only;
   other holders find out on their own reply.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, NoReturn

import hiredis
import redis

from .packing import pack, pack_all
from .replies import CONNECTION_ERRORS, raise_refusal, reply_code, retry_replies, unavailable
from .sockets import kernel_timeouts

if TYPE_CHECKING:
    from .pool import RedisPool

__all__ = ["Lease"]


# Bytes asked of the socket per read, when the connection has no read buffer to share.
READ_SIZE = 65536
# Marks "the reply is not complete yet": never a reply (RESP3's false is one: not False).
_INCOMPLETE = object()
# TCP's "more is coming" send flag (Linux); 0 where the platform has none.
_MSG_MORE: int = getattr(socket, "MSG_MORE", 0)
# A RESP3 push message, as hiredis makes it (hiredis releases without RESP3 have none).
_PUSH: type | None = getattr(hiredis, "PushNotification", None)


class _Wire:
    """A connection's socket, spoken to directly: commands written to it, replies read off
    it by a hiredis reader.

    RESP2 and RESP3 alike: hiredis parses both, as it does under redis-py. A RESP3 push
    message (a maintenance notice, the only kind a connection that never subscribes or
    tracks keys is sent) is no reply: it goes to redis-py's handler, and reading goes on.
    """

    __slots__ = ("_buffer", "_on_push", "_reader", "hold", "sock")

    def __init__(self, connection: Any) -> None:
        self.sock = connection._sock
        # The flag that has the kernel hold a write back for the next one (``Lease.send_one``):
        # TCP's MSG_MORE where the platform has it (Linux); 0 for a TLS socket (which takes
        # no flags) and a Unix socket (which has nothing to hold).
        self.hold = _MSG_MORE if type(self.sock) is socket.socket \
            and self.sock.family in (socket.AF_INET, socket.AF_INET6) else 0
        # redis-py's parser turns the error text into its exception classes (NoScriptError,
        # ReadOnlyError…): the reader calls it for each error reply, as redis-py's does.
        parser = connection._parser
        self._reader = hiredis.Reader(protocolError=redis.exceptions.InvalidResponse,
                                      replyError=parser.parse_error,
                                      notEnoughData=_INCOMPLETE)
        self._on_push = getattr(parser, "handle_push_response", None)
        # redis-py's hiredis parser keeps a read buffer per connection, idle while the lease
        # reads: shared rather than a second one (the reader copies what it is fed).
        buffer = getattr(parser, "_buffer", None)
        self._buffer = buffer if isinstance(buffer, bytearray) and buffer else \
            bytearray(READ_SIZE)

    @staticmethod
    def fit(connection: Any) -> bool:
        """Replies as bytes (what every holder of a lease reads), on a live socket."""
        return not connection.encoder.decode_responses and connection._sock is not None

    def read(self) -> Any:
        """The next reply; an error reply is returned, not raised, as an exception."""
        while True:
            reply = self._reader.gets()
            while reply is _INCOMPLETE:
                size = self.sock.recv_into(self._buffer)
                if not size:
                    raise redis.ConnectionError("Connection closed by server.")
                # A bytearray with a length, as redis-py feeds it: no copy (the stub is narrow).
                self._reader.feed(self._buffer, 0, size)  # type: ignore[arg-type]
                reply = self._reader.gets()
            if _PUSH is None or not isinstance(reply, _PUSH):
                return reply
            if self._on_push is not None:
                self._on_push(reply)

    def read_many(self, count: int) -> list[Any]:
        """The next ``count`` replies, as ``read`` returns each: a pipeline's replies (the
        ACKs of the jobs a processor ran since its last round trip, then the fetch) are
        mostly in the buffer already, taken without a call per reply."""
        replies: list[Any] = []
        gets = self._reader.gets
        while len(replies) < count:
            reply = gets()
            if reply is _INCOMPLETE:
                replies.append(self.read())  # the socket read, pushes and all
            elif _PUSH is not None and isinstance(reply, _PUSH):
                if self._on_push is not None:
                    self._on_push(reply)
            else:
                replies.append(reply)
        return replies

    def pending(self) -> bool:
        """Bytes read past the last reply (nothing a request asked for)."""
        return bool(self._reader.has_data())


class Lease:
    """One connection held by one thread across many commands.

    A processor fetches thousands of times a second; taking a connection from the pool and
    going through redis-py's command machinery for each costs more CPU than the round trip
    itself. A lease keeps the connection and speaks to it directly. Nothing is ever
    replayed: a broken connection is dropped, reported as ``RedisUnavailable``, and the next
    call takes a fresh one.
    """

    def __init__(self, pool: RedisPool) -> None:
        self.pool = pool
        # The replies that mean "this connection reaches the wrong node": it is dropped.
        self._retire_on = retry_replies(pool.url)
        self._connection: Any = None
        self._wire: _Wire | None = None  # None: redis-py reads and writes (a decoding pool)
        self._unread = 0  # replies of commands written by ``send``, not read yet
        self._holding = False  # a write the kernel holds back for the next (``send_one``)

    def call(self, *args: Any) -> Any:
        """One command, one round trip; a transient refusal raises ``RedisUnavailable``."""
        if self._unread:
            raise RuntimeError("Lease.call with replies unread: read them with pipeline()")
        packed = pack(args)
        try:
            connection = self._take()
            self._write(connection, packed)
            reply = self._read(connection)
        except BaseException as exc:
            self._lost(exc)
        if isinstance(reply, redis.ResponseError):
            self._after_refusal(reply)
            raise_refusal(reply, self.pool.url)
        return reply

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        """Write commands without waiting for their replies: the next ``pipeline`` returns
        them first. Redis acts on them now; the caller learns how it went one round trip
        later. A broken connection raises ``RedisUnavailable``, and then whether they
        reached Redis is unknown."""
        packed = pack_all(commands)
        try:
            self._write(self._take(), packed)
        except BaseException as exc:
            self._lost(exc)
        self._unread += len(commands)

    def send_one(self, command: tuple[Any, ...]) -> None:
        """``send`` of one command (a processor's ACK, once per job), without the list.

        On TCP the kernel holds it back (MSG_MORE) until this connection's next write, which
        then carries both in one segment — unless a write is held already: that one and this
        go out now. So Redis, woken once for two ACKs or for an ACK and the next fetch,
        spends less and so does the worker (waking an idle Redis is most of a small write's
        cost). The kernel sends what it holds after 0.2 s at the latest, and when the
        process dies (closing the socket sends it); one lost with a cut connection is sent
        again by the fetcher, whose next round trip fails. Only a host going down loses it,
        or a reaper overtakes it: that job may then run again (docs/guarantees.md)."""
        packed = pack(command)
        try:
            self._write(self._take(), packed, hold=True)
        except BaseException as exc:
            self._lost(exc)
        self._unread += 1

    def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Several commands in one round trip; error replies come back as exceptions in place,
        so one refused command does not desynchronise the connection. The replies of
        commands written earlier by ``send`` come first."""
        packed = pack_all(commands)
        try:
            connection = self._take()
            if commands:
                self._write(connection, packed)
            count = self._unread + len(commands)
            wire = self._wire
            replies = wire.read_many(count) if wire is not None \
                else [self._read(connection) for _ in range(count)]
            self._unread = 0
        except BaseException as exc:
            self._lost(exc)
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                self._after_refusal(reply)
        return replies

    def _lost(self, exc: BaseException) -> NoReturn:
        """The connection is out of step — broken, or a command cut short between request
        and reply (an interrupt): never used again. A broken one is ``RedisUnavailable``."""
        self._drop()
        if isinstance(exc, CONNECTION_ERRORS):
            raise unavailable(exc, self.pool.url) from exc
        raise exc

    def _after_refusal(self, exc: redis.ResponseError) -> None:
        """A failover reply: this connection reaches a demoted master; the next one may
        reach the new master (through a proxy, Sentinel-aware DNS or a VIP). On a cluster,
        ``MOVED`` too: the next connection asks the nodes where the slot is now."""
        if reply_code(exc) in self._retire_on:
            self._drop()

    def _write(self, connection: Any, packed: bytes, *, hold: bool = False) -> None:
        wire = self._wire
        if wire is None:
            connection.send_packed_command([packed], check_health=False)
        elif hold and wire.hold and not self._holding:
            wire.sock.sendall(packed, wire.hold)  # a failure drops the connection (``_lost``)
            self._holding = True
        else:
            wire.sock.sendall(packed)  # what the kernel held goes out with it
            self._holding = False

    def _read(self, connection: Any) -> Any:
        """The next reply, an error reply as its exception (returned, not raised)."""
        if self._wire is not None:
            return self._wire.read()
        try:
            return connection.read_response()
        except redis.ResponseError as exc:
            return exc

    def _take(self) -> Any:
        if self._connection is None:
            connection = self.pool.take_connection()
            kernel_timeouts(connection._sock, self.pool.socket_timeout)
            self._wire = _Wire(connection) if _Wire.fit(connection) else None
            self._connection = connection
        return self._connection

    def drop(self) -> None:
        """Close the connection rather than lend it again; the next call takes a fresh one."""
        self._drop()

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        self._wire = None
        self._unread = 0
        self._holding = False
        if connection is not None:
            connection.disconnect()
            self.pool.release_connection(connection)

    def release(self) -> None:
        """Give the connection back to the pool (when the holder stops)."""
        if self._unread or (self._wire is not None and self._wire.pending()):
            self._drop()  # replies still on the wire, or read ahead: not to be lent again
            return
        connection, self._connection = self._connection, None
        self._wire = None
        # A held write leaves its reply unread, and unread replies drop the connection
        # above: nothing is held here.
        self._holding = False
        if connection is not None:
            if connection._sock is not None:  # back to redis-py's own way of timing out
                connection._sock.settimeout(self.pool.socket_timeout)
            self.pool.release_connection(connection)
