"""``wurk.connections.lease``: replies read off the socket by the lease's own hiredis reader."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk.connections.lease import READ_SIZE, Lease
from wurk.connections.pool import READ_BUFFER
from wurk.errors import RedisUnavailable


def _lease(config: wurk.Config) -> Lease:
    return Lease(config.pool("lease-test", size=2))


def test_a_reply_longer_than_one_read_comes_whole(config: wurk.Config) -> None:
    lease = _lease(config)
    value = b"x" * (READ_SIZE * 3 + 17)
    assert lease.pipeline([("SET", "big", value), ("GET", "big"), ("STRLEN", "big")]) == [
        b"OK", value, len(value)]
    assert lease.call("GET", "big") == value


def test_error_replies_are_redis_pys_own_exceptions(config: wurk.Config) -> None:
    """The same classes redis-py raises: callers test for NoScriptError, read READONLY…"""
    lease = _lease(config)
    lease.call("SET", "text", "v")
    with pytest.raises(redis.exceptions.NoScriptError):
        lease.call("EVALSHA", "0" * 40, 0)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        lease.call("LPUSH", "text", "x")
    replies = lease.pipeline([("INCR", "text"), ("GET", "text")])
    assert isinstance(replies[0], redis.ResponseError) and replies[1] == b"v"
    assert lease.call("PING") in (b"PONG", "PONG", True)  # the connection stayed in step


def test_a_connection_closed_by_the_server_is_unavailable_then_replaced(
    config: wurk.Config, r: redis.Redis
) -> None:
    lease = _lease(config)
    first = lease.call("CLIENT", "ID")
    r.client_kill_filter(_id=first)
    with pytest.raises(RedisUnavailable):
        lease.call("GET", "k")
    assert lease.call("CLIENT", "ID") != first


def test_push_messages_between_replies_are_not_taken_for_replies(
    config: wurk.Config, r: redis.Redis
) -> None:
    """A RESP3 connection may be sent a push message at any time (key tracking here; a
    server's maintenance notices in production): the next reply is still the reply."""
    lease = _lease(config)
    lease.call("PING")
    connection: Any = lease._connection
    if str(getattr(connection, "protocol", 2)) != "3":
        pytest.skip("this redis-py speaks RESP2 by default: no push messages")
    wire: Any = lease._wire
    pushes: list[Any] = []
    handler = wire._on_push
    wire._on_push = lambda push: (pushes.append(push), handler and handler(push))
    assert lease.call("CLIENT", "TRACKING", "ON") == b"OK"
    r.set("tracked", "1")
    assert lease.call("GET", "tracked") == b"1"
    r.set("tracked", "2")  # an invalidation push is now on the lease's wire
    assert lease.call("ECHO", "after") == b"after"
    assert lease.call("GET", "tracked") == b"2"
    assert pushes and pushes[0][0] in (b"invalidate", "invalidate")  # given to redis-py


def test_a_reply_read_ahead_keeps_the_connection_from_the_pool(config: wurk.Config) -> None:
    """Bytes read past the last reply a holder asked for make the connection unfit to lend
    again: released, it is closed rather than handed to the next holder."""
    lease = _lease(config)
    first = lease.call("CLIENT", "ID")
    connection: Any = lease._connection
    connection.send_packed_command([b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n"],
                                   check_health=False)
    sock = connection._sock  # both replies on the socket (peeked): one read takes them both
    wait_until(lambda: len(sock.recv(64, socket.MSG_PEEK)) >= len(b"+PONG\r\n") * 2,
               what="both replies")
    replies: Any = lease._wire
    assert replies.read() in (b"PONG", "PONG") and replies.pending()
    lease.release()
    assert lease.call("CLIENT", "ID") != first


def test_pooled_connections_read_into_a_small_buffer_and_still_take_big_replies(
    config: wurk.Config,
) -> None:
    """Each pooled connection reads ``READ_BUFFER`` bytes at a time (redis-py's own 64 KiB
    per connection was 1.3 MB over a worker's connections); a reply many times that size
    comes whole, through the lease and through redis-py alike."""
    pool = config.pool("buffer-test", size=2)
    value = b"y" * (READ_BUFFER * 5 + 3)
    assert pool.run(lambda r: r.set("big", value) and r.get("big")) == value
    connection = pool.take_connection()
    try:
        assert pool._pool.connection_kwargs["socket_read_size"] == READ_BUFFER
        buffer = getattr(connection._parser, "_buffer", None)
        assert buffer is None or len(buffer) == READ_BUFFER  # hiredis keeps one that size
    finally:
        pool.release_connection(connection)
    assert Lease(pool).call("GET", "big") == value


HOLDS = hasattr(socket, "MSG_MORE")  # Linux: the kernel can hold a write for the next one


def test_an_ack_is_held_for_the_connections_next_write_and_goes_out_with_it(
    config: wurk.Config, r: redis.Redis
) -> None:
    """``send_one`` (a processor's ACK) on TCP is held by the kernel for the next write; a
    second goes out at once and takes the first with it, so no more than one is held."""
    r.rpush("acks", "a", "b", "c", "d")
    lease = _lease(config)
    lease.call("PING")
    lease.send_one(("LREM", "acks", 1, "a"))
    assert lease._holding is HOLDS
    lease.send_one(("LREM", "acks", 1, "b"))
    assert lease._holding is False  # written: nothing held any more
    assert lease.pipeline([("LLEN", "acks")]) == [1, 1, 2]  # both ACKs ran, in order
    lease.send_one(("LREM", "acks", 1, "c"))
    assert lease.pipeline([]) == [1]  # a round trip takes it out


def test_an_ack_held_alone_reaches_redis_without_another_write(
    config: wurk.Config, r: redis.Redis
) -> None:
    """The kernel sends a held write after 0.2 s at most: an ACK followed by a long job (no
    other write on its connection) still reaches Redis."""
    r.rpush("acks", "a", "b")
    lease = _lease(config)
    lease.call("PING")
    written = time.monotonic()
    lease.send_one(("LREM", "acks", 1, "a"))
    wait_until(lambda: r.llen("acks") == 1, what="the held ACK")
    assert r.lrange("acks", 0, -1) == ["b"]
    # The kernel's 0.2 s, with room for a loaded test machine's scheduling; held until
    # another write, it would never come.
    assert time.monotonic() - written < 2.0


_KILLED_HOLDER = """
import sys, time
import wurk
from tests.helpers.wait import wait_until
from wurk.connections.lease import Lease
lease = Lease(wurk.Config(redis_url=sys.argv[1]).pool("held", size=1))
lease.call("PING")
lease.send_one(("LREM", "acks", 1, "a"))
print(lease._holding, flush=True)
time.sleep(60)
"""


def test_an_ack_held_when_its_process_is_killed_still_reaches_redis(
    config: wurk.Config, r: redis.Redis
) -> None:
    """SIGKILL closes the process's sockets, and closing sends what the kernel held: a job
    acknowledged just before its worker was killed does not run again."""
    r.rpush("acks", "a", "b")
    child = subprocess.Popen([sys.executable, "-c", _KILLED_HOLDER, config.redis_url],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == str(HOLDS)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    wait_until(lambda: r.llen("acks") == 1, what="the ACK the killed process held")
    assert r.lrange("acks", 0, -1) == ["b"]
