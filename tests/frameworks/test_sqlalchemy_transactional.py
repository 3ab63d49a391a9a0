"""Transactional push with SQLAlchemy: pushes wait for the commit, a rollback drops them,
a push Redis cannot take at the commit raises from it (or, with reliable push, is kept and
sent later), against a real database (SQLite) and the real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Connection, Integer, String, create_engine, select
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    mapped_column,
    scoped_session,
    sessionmaker,
)

import wurk
import wurk.testing
from tests.helpers.faults import Restartable, config_for
from tests.helpers.server import Server
from tests.helpers.wait import wait_until
from wurk.client import reliable
from wurk.contrib.sqlalchemy import SQLAlchemyAdapter


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item: Mapped[str] = mapped_column(String(50))


@wurk.job(name="Tx::Ship")
def ship(order_id: int) -> None: ...


@wurk.job(name="Tx::Once", unique_for=60)
def once(order_id: int) -> None: ...


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[scoped_session[Session]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
    Base.metadata.create_all(engine)
    registry = scoped_session(sessionmaker(engine))
    yield registry
    registry.remove()
    engine.dispose()


@pytest.fixture
def tx(redis_server: Server, sessions: scoped_session[Session]) -> wurk.Config:
    return wurk.configure(redis_url=redis_server.url, client="transactional",
                          transaction=SQLAlchemyAdapter(sessions))


def queued(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]


def test_a_push_waits_for_the_commit_and_keeps_its_jid(tx: wurk.Config, r: redis.Redis,
                                                       sessions: scoped_session[Session]) -> None:
    session = sessions()
    with session.begin():
        order = Order(item="book")
        session.add(order)
        session.flush()
        jid = ship.perform_async(order.id)
        assert jid is not None and len(jid) == 24
        assert queued(r) == []
    (job,) = queued(r)
    assert job["jid"] == jid
    assert job["args"] == [order.id]
    assert "transactional" not in job


def test_a_unique_duplicate_gets_a_jid_and_is_dropped_only_at_the_commit(
        tx: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    """unique-jobs.md: "Transactional pushes return the jid when the push is deferred to the
    commit; a duplicate is found, and not pushed, only at the commit." """
    held = once.set(transactional=False).perform_async(7)  # pending: it holds the lock
    session = sessions()
    with session.begin():
        session.add(Order(item="book"))
        deferred = once.perform_async(7)
        assert deferred is not None and deferred != held  # no lock was looked at yet
        assert len(queued(r)) == 1 and r.get(next(r.scan_iter("unique:*"))) == held
    assert [job["jid"] for job in queued(r)] == [held]  # the duplicate was not pushed
    assert session.scalars(select(Order)).one().item == "book"


def test_a_rollback_pushes_nothing(tx: wurk.Config, r: redis.Redis,
                                   sessions: scoped_session[Session]) -> None:
    session = sessions()
    session.add(Order(item="book"))
    ship.perform_async(1)
    session.rollback()
    assert queued(r) == []
    assert session.scalars(select(Order)).all() == []
    session.add(Order(item="pen"))  # the next transaction does not inherit the dropped push
    session.commit()
    assert queued(r) == []


def test_closing_without_commit_drops_the_push(tx: wurk.Config, r: redis.Redis,
                                               sessions: scoped_session[Session]) -> None:
    session = sessions()
    session.add(Order(item="book"))
    ship.perform_async(1)
    session.close()
    assert queued(r) == []


def test_outside_a_transaction_it_pushes_at_once(tx: wurk.Config, r: redis.Redis) -> None:
    ship.perform_async(1)
    assert len(queued(r)) == 1


def test_savepoints(tx: wurk.Config, r: redis.Redis,
                    sessions: scoped_session[Session]) -> None:
    session = sessions()
    with session.begin():
        ship.perform_async(1)
        with session.begin_nested():
            ship.perform_async(2)  # released with its savepoint: pushed at the commit
        savepoint = session.begin_nested()
        ship.perform_async(3)
        with session.begin_nested():
            ship.perform_async(4)  # inside the savepoint rolled back below: dropped
        savepoint.rollback()
        ship.perform_async(5)
        assert queued(r) == []
    assert sorted(j["args"][0] for j in queued(r)) == [1, 2, 5]


def test_transactional_false_and_bulk_push_at_once(tx: wurk.Config, r: redis.Redis,
                                                   sessions: scoped_session[Session]) -> None:
    session = sessions()
    with session.begin():
        session.add(Order(item="book"))
        ship.set(transactional=False).perform_async(1)
        ship.perform_bulk([[2], [3]])
        assert sorted(j["args"][0] for j in queued(r)) == [1, 2, 3]
        ship.perform_async(4)
    assert len(queued(r)) == 4
    assert all("transactional" not in j for j in queued(r))


def test_a_batch_member_pushes_at_once_inside_a_transaction(
        tx: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    """docs: a batch member (a payload with `bid`) pushes at once, even inside a
    transaction — a rollback does not take it back."""
    session = sessions()
    session.begin()
    session.add(Order(item="book"))
    batch = wurk.Batch()
    with batch.jobs():
        ship.perform_async(5)
    assert [(j["args"], j["bid"]) for j in queued(r)] == [([5], batch.bid)]
    session.rollback()
    assert [j["args"] for j in queued(r)] == [[5]]


def test_client_middleware_runs_at_the_commit(tx: wurk.Config, r: redis.Redis,
                                              sessions: scoped_session[Session]) -> None:
    calls: list[str] = []

    def count(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        calls.append(payload["jid"])
        return call_next()

    tx.client_middleware.add(count)
    session = sessions()
    with session.begin():
        session.add(Order(item="book"))
        jid = ship.perform_async(1)
        assert calls == []
    assert calls == [jid]
    with session.begin():
        session.add(Order(item="pen"))
        ship.perform_async(2)
        session.rollback()
    assert calls == [jid]


def test_fake_mode_sees_only_committed_pushes(tx: wurk.Config,
                                              sessions: scoped_session[Session]) -> None:
    session = sessions()
    with wurk.testing.fake():
        with session.begin():
            session.add(Order(item="book"))
            ship.perform_async(1)
            assert ship.jobs == []
        assert len(ship.jobs) == 1
        ship.clear()


def test_transactional_needs_an_adapter(redis_server: Server) -> None:
    with pytest.raises(wurk.ConfigError, match="client='transactional' needs"):
        wurk.configure(client="transactional")
    with pytest.raises(wurk.ConfigError, match="has no after_commit"):
        wurk.configure(client="transactional", transaction=object())


def test_a_push_failing_at_commit_raises_from_the_commit_after_the_data_is_kept(
        sessions: scoped_session[Session], monkeypatch: pytest.MonkeyPatch,
        redis_server: Server) -> None:
    from tests.helpers.server import free_port

    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")  # nobody there
    wurk.configure(client="transactional", transaction=SQLAlchemyAdapter(sessions),
                   socket_timeout=1)
    session = sessions()
    with pytest.raises(wurk.RedisUnavailable, match="could not push Tx::Ship"), \
            session.begin():
        session.add(Order(item="book"))
        ship.perform_async(1)
    sessions.remove()
    assert [o.item for o in sessions().scalars(select(Order))] == ["book"]


def test_with_reliable_push_a_push_redis_cannot_take_at_commit_is_kept_and_sent_later(
        sessions: scoped_session[Session], tmp_path: Path) -> None:
    """client="transactional" with reliable_push="memory": Redis down at the commit, the
    commit does not raise and the job is kept; it is in Redis once Redis is back, with no
    further push (the background flush)."""
    server = Restartable(tmp_path / "redis")
    try:
        wurk.configure(config_for(server.url, client="transactional",
                                  transaction=SQLAlchemyAdapter(sessions),
                                  reliable_push="memory"))
        server.stop()
        session = sessions()
        with session.begin():
            session.add(Order(item="book"))
            jid = ship.perform_async(1)
        server.start()
        r = server.client()
        wait_until(lambda: r.llen("queue:default") == 1, timeout=15, what="the kept push")
        assert [job["jid"] for job in queued(r)] == [jid]
    finally:
        for writer in list(reliable._writers):
            writer.close()
        server.stop()


def test_a_bad_push_raises_at_the_call_and_defers_nothing(
        tx: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    session = sessions()
    with session.begin():
        session.add(Order(item="book"))
        with pytest.raises(wurk.InvalidArguments, match="argument 0 is bytes"):
            ship.perform_async(b"not JSON")  # type: ignore[arg-type]
        with pytest.raises(wurk.InvalidArguments, match="lone surrogate"):
            asyncio.run(ship.aperform_async("\ud800"))  # type: ignore[arg-type]
        with pytest.raises(wurk.InvalidPayload, match=r"queue name 'a\|b'"):
            wurk.push({"class": "Tx::Ship", "args": [1], "queue": "a|b"})
        with pytest.raises(wurk.InvalidPayload, match="'at'"):
            wurk.push({"class": "Tx::Ship", "args": [1], "at": float("nan")})
        jid = ship.perform_async(1)
    assert [(job["jid"], job["args"]) for job in queued(r)] == [(jid, [1])]


def test_every_push_is_attempted_at_the_commit_and_the_first_error_raised(
        tx: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    def refuses_even(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        if payload["args"][0] % 2 == 0:  # middleware runs at the commit
            raise RuntimeError(f"refused {payload['args'][0]}")
        return call_next()

    tx.client_middleware.add(refuses_even)
    session = sessions()
    with pytest.raises(RuntimeError, match="refused 2"), session.begin():
        session.add(Order(item="book"))
        for n in range(1, 6):
            ship.perform_async(n)
    assert sorted(job["args"][0] for job in queued(r)) == [1, 3, 5]
    sessions.remove()
    assert [o.item for o in sessions().scalars(select(Order))] == ["book"]


def test_created_at_is_the_time_of_the_call_not_of_the_commit(
        tx: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    """transactional-push.md: the push is normalised at the call, "so its created_at is the
    time of the call, not of the commit"."""
    import time

    session = sessions()
    with session.begin():
        session.add(Order(item="book"))
        before = time.time()
        ship.perform_async(1)
        after = time.time()
        wait_until(lambda: time.time() > after + 0.05, what="the clock to move on")
        committed = time.time()
    (job,) = queued(r)
    created = job["created_at"] / (1000 if job["created_at"] > 1e11 else 1)
    assert before - 0.001 <= created <= after + 0.001 < committed - 0.04


def test_a_middleware_refusing_at_the_commit_makes_the_push_a_no_op(
        tx: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    """transactional-push.md: "a middleware that refuses the job then makes that push a
    no-op, though the caller already has the jid" — nothing raised, nothing pushed."""

    def refuses(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        return None if payload["args"] == [2] else call_next()

    tx.client_middleware.add(refuses)
    session = sessions()
    with session.begin():
        session.add(Order(item="book"))
        kept = ship.perform_async(1)
        refused = ship.perform_async(2)
        assert kept is not None and refused is not None and kept != refused
    assert [job["jid"] for job in queued(r)] == [kept]
    assert r.zcard("schedule") == 0 and r.zcard("retry") == 0


@pytest.mark.parametrize("how", ["create_engine", "execution_options", "connection"])
def test_a_session_in_autocommit_pushes_at_once(how: str, redis_server: Server,
                                                r: redis.Redis, tmp_path: Path) -> None:
    """In AUTOCOMMIT each statement is committed as it runs and ``commit()`` is a no-op that
    code may never call: the push waited for it, and a session closed without it (its
    data kept) dropped the push. It goes at once now, as with Django's autocommit."""
    url = f"sqlite:///{tmp_path / 'auto.db'}"
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    bind: Any = {"create_engine": lambda: create_engine(url, isolation_level="AUTOCOMMIT"),
                 "execution_options": lambda: engine.execution_options(
                     isolation_level="AUTOCOMMIT"),
                 "connection": lambda: engine.connect().execution_options(
                     isolation_level="AUTOCOMMIT")}[how]()
    registry = scoped_session(sessionmaker(bind))
    wurk.configure(redis_url=redis_server.url, client="transactional",
                   transaction=SQLAlchemyAdapter(registry))
    session = registry()
    session.add(Order(item="book"))
    session.flush()  # kept at once: no transaction to wait for
    ship.perform_async(1)
    assert [job["args"] for job in queued(r)] == [[1]]
    session.close()  # never committed: nothing is dropped
    registry.remove()
    assert len(queued(r)) == 1
    with Session(engine) as other:
        assert other.scalars(select(Order.item)).all() == ["book"]
    if isinstance(bind, Connection):
        bind.close()
    engine.dispose()
