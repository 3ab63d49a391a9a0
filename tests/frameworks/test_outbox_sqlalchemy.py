"""The transactional outbox with SQLAlchemy, against a real PostgreSQL and SQLite and the real
server: a push inside a transaction is a row of it; committed means pushed, rolled back
means never pushed, Redis down at commit loses nothing; relays never share a row."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, Integer, String, create_engine, event, func, select
from sqlalchemy.exc import DBAPIError
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
from tests.helpers.server import Server, small_bulk_server
from tests.helpers.wait import wait_until
from wurk.client.outbox import OutboxDuty, OutboxRow, relay_for
from wurk.contrib.sqlalchemy import SQLAlchemyAdapter, SQLAlchemyOutbox, outbox_table
from wurk.runtime.timer import Timers


class Base(DeclarativeBase):
    pass


OUTBOX = outbox_table(Base.metadata)


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item: Mapped[str] = mapped_column(String(50))


@wurk.job(name="Outbox::Ship")
def ship(order_id: int) -> None: ...


@wurk.job(name="Outbox::Once", unique_for=60)
def once(key: int) -> None: ...


@wurk.job(name="Outbox::ByFirst", unique_for=60,
          unique_context=lambda payload: [payload["args"][0]])
def by_first(key: int) -> None: ...


# The tests of the relay's SKIP LOCKED path run on MariaDB too (docs/outbox.md names it): a
# server of its own per test process, through PyMySQL (``mariadb_url``, tests/conftest.py).
ALL_DATABASES = ["sqlite", "postgresql", "mariadb"]


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shop.db'}"
    elif request.param == "mariadb":
        url = request.getfixturevalue("mariadb_url")
    else:
        url = request.getfixturevalue("pg_url").replace("postgresql://",
                                                        "postgresql+psycopg://")
    made = create_engine(url)
    Base.metadata.create_all(made)
    yield made
    made.dispose()


@pytest.fixture
def sessions(engine: Engine) -> Iterator[scoped_session[Session]]:
    registry = scoped_session(sessionmaker(engine))
    yield registry
    registry.remove()


def outbox_config(url: str, sessions: scoped_session[Session], engine: Engine,
                  **settings: Any) -> wurk.Config:
    return wurk.configure(config_for(url, client="outbox", transaction=SQLAlchemyAdapter(
        sessions, outbox=OUTBOX, engine=engine), **settings))


@pytest.fixture
def box(redis_server: Server, sessions: scoped_session[Session], engine: Engine
        ) -> Iterator[wurk.Config]:
    config = outbox_config(redis_server.url, sessions, engine)
    yield config
    # A pass still under way would push into the next test's Redis (flushed, with its
    # records of what was sent): this test's relay ends with it.
    relay_for(config).stop()


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(f"queue:{queue}", 0, -1)]


def rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(OUTBOX)).scalar_one())


@pytest.mark.parametrize("engine", ALL_DATABASES, indirect=True)
def test_a_push_in_a_transaction_is_a_row_of_it_and_is_relayed_after_the_commit(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    session = sessions()
    with session.begin():
        order = Order(item="book")
        session.add(order)
        session.flush()
        jid = ship.perform_async(order.id)
        assert jid is not None
        # In the transaction: a row of it, nothing in Redis.
        assert session.execute(select(OUTBOX.c.jid)).scalars().all() == [jid]
        assert queued(r) == []
    # The commit woke this process's relay: no worker, no poll.
    wait_until(lambda: queued(r), what="the relayed job")
    (job,) = queued(r)
    assert job["jid"] == jid and job["args"] == [order.id]
    assert "transactional" not in job
    wait_until(lambda: rows(engine) == 0, what="the row's deletion")
    # The jid's record in Redis is dropped once the row's deletion was committed.
    wait_until(lambda: r.zcard("wurk:push-sent") == 0, what="the record forgotten")


@pytest.mark.parametrize("engine", ALL_DATABASES, indirect=True)
def test_a_rollback_pushes_nothing_and_leaves_no_row(box: wurk.Config, r: redis.Redis,
                                                      sessions: scoped_session[Session],
                                                      engine: Engine) -> None:
    session = sessions()
    with pytest.raises(RuntimeError), session.begin():
        ship.perform_async(1)
        raise RuntimeError("out of stock")
    relay_for(box).run_once()
    assert rows(engine) == 0
    assert queued(r) == []


def test_a_jid_longer_than_the_jid_column_is_refused_at_the_call_not_by_the_database(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    session = sessions()
    with session.begin():
        order = Order(item="book")
        session.add(order)
        session.flush()
        with pytest.raises(wurk.InvalidPayload, match=r"65 characters.*at most 64"):
            ship.set(jid="j" * 65).perform_async(order.id)
        # The caller's transaction is still usable (PostgreSQL aborted it before).
        kept = ship.set(jid="k" * 64).perform_async(order.id)
        session.add(Order(item="pen"))
    assert kept == "k" * 64
    wait_until(lambda: queued(r), what="the relayed job")
    assert [job["jid"] for job in queued(r)] == ["k" * 64]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Order)).scalar_one() == 2


def test_a_savepoint_rolled_back_drops_only_its_rows(box: wurk.Config, r: redis.Redis,
                                                      sessions: scoped_session[Session]
                                                      ) -> None:
    session = sessions()
    with session.begin():
        ship.perform_async(1)
        nested = session.begin_nested()
        ship.perform_async(2)
        nested.rollback()
        ship.perform_async(3)
    wait_until(lambda: len(queued(r)) == 2, what="two jobs")
    assert sorted(job["args"][0] for job in queued(r)) == [1, 3]


class WaitsSeen(threading.Event):
    """The relay's wake event, noting each wait its thread takes while the relay fails:
    (the wait, the backoff's ceiling then)."""

    def __init__(self, relay: Any) -> None:
        super().__init__()
        self.relay = relay
        self.failing: list[tuple[float, float]] = []

    def wait(self, timeout: float | None = None) -> bool:
        if self.relay.duty.failing and timeout is not None:
            self.failing.append((timeout, self.relay.duty.backoff.ceiling))
        return super().wait(timeout)


def test_redis_down_at_commit_loses_nothing(tmp_path: Path, sessions: scoped_session[Session],
                                            engine: Engine,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="wurk")
    server = Restartable(tmp_path / "redis")
    try:
        config = outbox_config(server.url, sessions, engine)
        relay = relay_for(config)
        waits = WaitsSeen(relay)
        relay._wake = waits  # the event the relay's thread waits on between its tries
        server.stop()
        session = sessions()
        with session.begin():
            jids = [ship.perform_async(n) for n in range(5)]
        # The commit went through; the rows wait while the relay backs off: waits drawn
        # below a ceiling that starts at 0.1 s and doubles, up to 5 s (outbox.md).
        wait_until(lambda: relay.duty.outage.active, what="the relay's try")
        wait_until(lambda: len(waits.failing) >= 4, what="four tries, backed off")
        ceilings = [ceiling for _, ceiling in waits.failing[:4]]
        assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8])
        assert all(0 <= wait <= ceiling for wait, ceiling in waits.failing)
        assert relay.duty.backoff.cap == 5.0
        assert rows(engine) == 5
        server.start()
        direct = server.client(decode_responses=True)
        wait_until(lambda: direct.llen("queue:default") == 5, timeout=20,
                   what="the rows relayed once Redis is back, with no push or poll")
        assert sorted(json.loads(raw)["jid"] for raw in direct.lrange("queue:default", 0, -1)) \
            == sorted(jids)
        wait_until(lambda: rows(engine) == 0, what="the rows' deletion")
        # the pass that sent them ends the outage once it is over, a moment after the delete
        wait_until(lambda: not relay_for(config).duty.outage.active, what="the outage over")

        # The outage was said once, at its start, and its end logged (by the relay's thread,
        # just after the outage reads as over).
        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if "outbox relay" in r.getMessage()]

        wait_until(lambda: any("Redis is back after" in line for line in said()),
                   what="the outage's end logged")
        assert any("RedisUnavailable" in line for line in said()), said()
    finally:
        server.stop()


class WakeAsTheWaitRunsOut(threading.Event):
    """The relay's wake event: the first wait of its thread that runs out (the wait before
    it drops its records) lets a commit land and wake the relay just then, before the
    thread goes on."""

    def __init__(self) -> None:
        super().__init__()
        self.commit: Callable[[], None] | None = None  # armed by the test

    def wait(self, timeout: float | None = None) -> bool:
        woken = super().wait(timeout)
        if not woken and timeout is not None and self.commit is not None:
            commit, self.commit = self.commit, None
            commit()
        return woken


def test_a_commit_that_wakes_the_relay_as_its_wait_runs_out_is_relayed(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    """The relay's thread cleared its wake event after every wait, even one that had run
    out: a commit's wake set between the two was erased, and its rows waited for the next
    commit of the process (or a worker's poll) — with no worker polling, for ever."""
    relay = relay_for(box)

    def commit_then() -> None:
        # A commit on another thread, woken into this one's wait: the scoped session here
        # is this thread's own, and its commit hook wakes the relay as any commit does.
        try:
            with sessions().begin():
                ship.perform_async(2)
        finally:
            sessions.remove()

    # The event the relay's thread waits on. Its first wait that runs out is the one after
    # the first commit's pass, before it drops that pass's records (a second).
    event = relay._wake = WakeAsTheWaitRunsOut()
    event.commit = commit_then
    session = sessions()
    with session.begin():
        ship.perform_async(1)
    wait_until(lambda: len(queued(r)) == 2, timeout=10,
               what="the job of the commit that woke the relay as its wait ran out")
    assert event.commit is None  # that commit did land just then
    assert sorted(job["args"] for job in queued(r)) == [[1], [2]]


def test_outside_a_transaction_and_with_transactional_false_it_pushes_at_once(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    ship.perform_async(1)
    assert [job["args"] for job in queued(r)] == [[1]]
    session = sessions()
    with session.begin():
        ship.set(transactional=False).perform_async(2)
        assert len(queued(r)) == 2
        assert rows(engine) == 0


def test_bulk_pushes_and_scheduled_jobs_go_through_the_outbox(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    session = sessions()
    at = time.time() + 3600
    with session.begin():
        jids = ship.perform_bulk([[n] for n in range(10)])
        later = ship.perform_at(at, 99)
        assert queued(r) == [] and r.zcard("schedule") == 0
    wait_until(lambda: len(queued(r)) == 10 and r.zcard("schedule") == 1,
               what="the bulk and the scheduled job")
    assert sorted(job["jid"] for job in queued(r)) == sorted(jids)
    ((raw, score),) = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(raw)["jid"] == later and abs(score - at) < 0.01


def test_a_unique_jobs_duplicate_is_dropped_when_relayed(box: wurk.Config, r: redis.Redis,
                                                         sessions: scoped_session[Session],
                                                         engine: Engine) -> None:
    session = sessions()
    with session.begin():
        first = once.perform_async(7)
        second = once.perform_async(7)  # the lock is taken when the row is relayed
        assert first and second and first != second
    wait_until(lambda: rows(engine) == 0, what="both rows relayed")
    assert [job["jid"] for job in queued(r)] == [first]


def test_fake_mode_keeps_only_committed_pushes_and_needs_no_table(
        box: wurk.Config, sessions: scoped_session[Session], engine: Engine) -> None:
    session = sessions()
    with wurk.testing.fake():
        with session.begin():
            ship.perform_async(1)
            assert ship.jobs == []
        with pytest.raises(ValueError), session.begin():
            ship.perform_async(2)
            raise ValueError("rolled back")
        assert [job["args"] for job in ship.jobs] == [[1]]
        ship.clear()
    assert rows(engine) == 0


class Counting:
    """A store that counts how often each row is handed to a relay's push."""

    def __init__(self, store: SQLAlchemyOutbox) -> None:
        self.store = store
        self.handed: Counter[int] = Counter()
        self._lock = threading.Lock()

    def relay(self, limit: int, lease: float, push: Callable[[list[OutboxRow]], None]) -> int:
        def counted(batch: list[OutboxRow]) -> None:
            with self._lock:
                self.handed.update(row.id for row in batch if row.id is not None)
            time.sleep(0.005)  # hold the rows a moment: the other relays run meanwhile
            push(batch)

        return self.store.relay(limit, lease, counted)

    def pending(self) -> int:
        return self.store.pending()


def four_relays(box: wurk.Config, engine: Engine,
                retried: Callable[[BaseException], bool] = lambda exc: False
                ) -> tuple[Counting, list[wurk.client.outbox.Relay], list[BaseException]]:
    """400 rows written by another process (no commit hook here), taken by four relays at
    once until none is left; a pass failing with an error ``retried`` accepts is run again,
    as a worker's relay does after its backoff. Returns the store that counted each row
    handed out, the relays, and the other errors."""
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [
            {"jid": f"{n:024x}", "payload": json.dumps({
                "class": "Outbox::Ship", "args": [n], "queue": "default", "jid": f"{n:024x}",
                "retry": True, "created_at": 1}), "at": None, "created_at": time.time()}
            for n in range(400)])
    store = Counting(SQLAlchemyOutbox(engine, OUTBOX))
    relays = [wurk.client.outbox.Relay(box, store) for _ in range(4)]
    errors: list[BaseException] = []

    def work(relay: wurk.client.outbox.Relay) -> None:
        while store.pending():
            try:
                relay.run_once()
            except BaseException as exc:
                if not retried(exc):
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=work, args=(relay,)) for relay in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return store, relays, errors


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"], indirect=True)
def test_four_relays_never_take_one_row_twice(box: wurk.Config, r: redis.Redis,
                                              engine: Engine) -> None:
    """SKIP LOCKED on PostgreSQL, the claim column on SQLite: 400 rows taken by four relays
    at once, each row handed to exactly one of them."""
    store, relays, errors = four_relays(box, engine)
    assert errors == []
    assert len(store.handed) == 400 and set(store.handed.values()) == {1}
    assert sum(1 for relay in relays if relay.relayed) >= 2  # they did share the work
    assert r.llen("queue:default") == 400


@pytest.mark.parametrize("engine", ["mariadb"], indirect=True)
def test_four_relays_on_mariadb_never_deadlock_and_take_each_row_once(
        box: wurk.Config, r: redis.Redis, engine: Engine) -> None:
    """docs/outbox.md: on MariaDB 10.11 four relays taking rows at once do not deadlock.
    They did, in about two runs of three, on ``DELETE … WHERE id IN (…)``: the optimizer
    scanned the whole table and locked the rows the other relays held (the test below).
    400 rows, each handed out once, 400 distinct jobs in Redis; ``-s`` prints the count."""
    deadlocks: list[BaseException] = []

    def deadlock(exc: BaseException) -> bool:
        if isinstance(exc, DBAPIError) and exc.orig.args and exc.orig.args[0] == 1213:
            deadlocks.append(exc)
            return True
        return False

    store, _, errors = four_relays(box, engine, retried=deadlock)
    print(f"\n{len(deadlocks)} deadlocked passes, "
          f"{sum(store.handed.values()) - 400} rows handed out again")
    assert errors == [] and deadlocks == []
    assert len(store.handed) == 400 and set(store.handed.values()) == {1}
    queued = [json.loads(raw)["jid"] for raw in r.lrange("queue:default", 0, -1)]
    assert sorted(queued) == [f"{n:024x}" for n in range(400)]  # each job pushed once
    assert store.pending() == 0


@pytest.mark.parametrize("engine", ["postgresql", "mariadb"], indirect=True)  # rows locked
def test_a_relays_delete_does_not_wait_on_rows_another_relay_holds(engine: Engine) -> None:
    """The cause of MariaDB's deadlocks, without a race: another transaction holds rows
    1-100 (as a relay between its SELECT and its COMMIT does); a relay takes rows 101-200
    and deletes them at once. ``DELETE … WHERE id IN (101…200)`` on 400 rows was a scan of
    the whole table on MariaDB 10.11, which waited on row 1 (here for the 1 s lock timeout,
    error 1205; with two relays each waiting on the other's rows, error 1213)."""
    insert_jobs(engine, 400)
    impatient = create_engine(engine.url)  # the relay's: waits at most 1 s for a lock

    @event.listens_for(impatient, "connect")
    def at_most_a_second(dbapi_conn: Any, _: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("SET lock_timeout = '1s'" if engine.dialect.name == "postgresql"
                       else "SET SESSION innodb_lock_wait_timeout = 1")
        cursor.close()

    ids = select(OUTBOX.c.id).order_by(OUTBOX.c.id)
    pushed: list[OutboxRow] = []
    try:
        with engine.begin() as holder:
            held = holder.execute(ids.limit(100).with_for_update()).scalars().all()
            assert len(held) == 100
            # A wait on a held row ends in an error after 1 s (1205): no clock read needed.
            assert SQLAlchemyOutbox(impatient, OUTBOX).relay(100, 60, pushed.extend) == 100
        taken = [row.id for row in pushed]
        assert taken == sorted(taken) and taken[0] > held[-1]  # the next 100, oldest first
        assert rows(engine) == 300
        with engine.connect() as conn:
            assert held[0] in conn.execute(ids).scalars().all()  # the holder's are left
    finally:
        impatient.dispose()


@pytest.mark.parametrize("engine", ALL_DATABASES, indirect=True)
def test_a_row_pushed_before_its_deletion_failed_is_not_pushed_twice(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    """A relay that dies between the push and the deletion's commit leaves its rows for
    another; the jids' records in Redis keep the second relay from pushing them again."""
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [{"jid": "a" * 24, "payload": json.dumps({
            "class": "Outbox::Ship", "args": [1], "queue": "default", "jid": "a" * 24,
            "retry": True, "created_at": 1}), "at": None, "created_at": time.time()}])

    class DiesBeforeDeleting(SQLAlchemyOutbox):
        def relay(self, limit: int, lease: float,
                  push: Callable[[list[OutboxRow]], None]) -> int:
            def then_die(batch: list[OutboxRow]) -> None:
                push(batch)
                raise ConnectionError("the relay's database connection died")
            return super().relay(limit, lease, then_die)

    with pytest.raises(ConnectionError):
        wurk.client.outbox.Relay(box, DiesBeforeDeleting(engine, OUTBOX)).run_once()
    assert rows(engine) == 1 and r.llen("queue:default") == 1
    second = wurk.client.outbox.Relay(box, SQLAlchemyOutbox(engine, OUTBOX))
    assert second.run_once() == 1
    assert rows(engine) == 0
    assert r.llen("queue:default") == 1  # pushed once


@pytest.mark.parametrize("engine", ["postgresql", "mariadb"], indirect=True)  # rows locked
def test_a_relay_whose_connection_dies_mid_transaction_leaves_its_rows_to_another(
        box: wurk.Config, r: redis.Redis, engine: Engine) -> None:
    """docs/outbox.md: SELECT … FOR UPDATE SKIP LOCKED, push, DELETE, COMMIT in one
    transaction. While a relay holds its rows another relay skips them (it does not wait);
    when the holder's connection dies after its push (killed by the server) its locks go with
    it, and the next relay takes the rows and pushes none of them twice."""
    insert_jobs(engine, 2)
    dying = create_engine(engine.url)  # the relay's own connections: their ids are known
    ids: list[int] = []

    @event.listens_for(dying, "connect")
    def note(dbapi_conn: Any, _: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("SELECT pg_backend_pid()" if engine.dialect.name == "postgresql"
                       else "SELECT CONNECTION_ID()")
        ids.append(int(cursor.fetchone()[0]))
        cursor.close()

    other = wurk.client.outbox.Relay(box, SQLAlchemyOutbox(engine, OUTBOX))

    class DiesAfterItsPush(SQLAlchemyOutbox):
        def relay(self, limit: int, lease: float,
                  push: Callable[[list[OutboxRow]], None]) -> int:
            def then_killed(batch: list[OutboxRow]) -> None:
                assert len(batch) == 2
                assert other.run_once() == 0  # locked: skipped, not waited on
                push(batch)
                with engine.begin() as conn:  # the server ends the relay's connection
                    conn.exec_driver_sql(f"SELECT pg_terminate_backend({ids[-1]})"
                                         if engine.dialect.name == "postgresql"
                                         else f"KILL CONNECTION {ids[-1]}")
            return super().relay(limit, lease, then_killed)

    try:
        with pytest.raises(DBAPIError):
            wurk.client.outbox.Relay(box, DiesAfterItsPush(dying, OUTBOX)).run_once()
    finally:
        dying.dispose()
    assert rows(engine) == 2 and r.llen("queue:default") == 2
    assert other.run_once() == 2  # the dead relay's locks went with its connection
    assert rows(engine) == 0
    assert sorted(job["args"] for job in queued(r)) == [[0], [1]]  # each pushed once


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)  # PostgreSQL locks rows
def test_a_claim_a_dead_relay_left_is_taken_after_its_lease(
        redis_server: Server, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    """Where rows cannot be locked (SQLite), a relay claims them for a lease; a dead one's
    claim stops holding them when the lease ends (PostgreSQL lets a dead relay's row locks
    go with its connection)."""
    config = outbox_config(redis_server.url, sessions, engine, outbox_claim_timeout=0.3)
    with engine.begin() as conn:  # a row another relay claimed, then died
        conn.execute(OUTBOX.insert(), [{"jid": "c" * 24, "payload": json.dumps({
            "class": "Outbox::Ship", "args": [1], "queue": "default", "jid": "c" * 24,
            "retry": True, "created_at": 1}), "at": None, "created_at": time.time(),
            "claimed_by": "dead", "claimed_until": time.time() + 0.3}])
    relay = wurk.client.outbox.Relay(config, SQLAlchemyOutbox(engine, OUTBOX))
    assert relay.run_once() == 0  # held by its claim
    time.sleep(0.35)  # past the dead relay's lease (a lower bound: this is what is tested)
    assert relay.run_once() == 1
    assert rows(engine) == 0 and r.llen("queue:default") == 1


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)  # PostgreSQL locks rows
def test_a_claim_that_runs_out_during_the_push_keeps_the_records_of_its_rows(
        box: wurk.Config, r: redis.Redis, engine: Engine,
        caplog: pytest.LogCaptureFixture) -> None:
    """A relay whose lease ran out while it pushed (a push slower than
    ``outbox_claim_timeout``) deleted none of the rows another relay had claimed again, yet
    dropped their records of what was sent, so that relay pushed them a second time. The
    records of such a batch are now kept: the other relay finds the jobs already sent."""
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [{"jid": jid * 24, "payload": json.dumps({
            "class": "Outbox::Ship", "args": [n], "queue": "default", "jid": jid * 24,
            "retry": True, "created_at": 1}), "at": None, "created_at": time.time()}
            for n, jid in enumerate("de")])

    class OutlivedItsClaim(SQLAlchemyOutbox):
        def relay(self, limit: int, lease: float,
                  push: Callable[[list[OutboxRow]], None]) -> int:
            def then_reclaimed(batch: list[OutboxRow]) -> None:
                push(batch)
                with engine.begin() as conn:  # another relay, after the lease ran out
                    conn.execute(OUTBOX.update().values(claimed_by="other",
                                                        claimed_until=time.time() + 60))
            return super().relay(limit, lease, then_reclaimed)

    first = wurk.client.outbox.Relay(box, OutlivedItsClaim(engine, OUTBOX))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert first.run_once() == 0
    first.forget_now()
    assert rows(engine) == 2 and r.llen("queue:default") == 2
    assert any("ran out while they were pushed" in rec.getMessage() for rec in caplog.records)
    with engine.begin() as conn:  # the other relay's lease runs out too: anyone's to take
        conn.execute(OUTBOX.update().values(claimed_by=None, claimed_until=None))
    second = wurk.client.outbox.Relay(box, SQLAlchemyOutbox(engine, OUTBOX))
    assert second.run_once() == 2
    assert rows(engine) == 0 and r.llen("queue:default") == 2  # each pushed once


def test_a_row_that_is_not_a_job_goes_to_the_dead_set(box: wurk.Config, r: redis.Redis,
                                                      engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [{"jid": "x", "payload": "{not json", "at": None,
                                        "created_at": time.time()}])
    assert relay_for(box).run_once() == 1
    assert r.zrange("dead", 0, -1) == ["{not json"]
    assert rows(engine) == 0


@pytest.mark.parametrize(("payload", "at"), [
    ({"class": "Outbox::Ship", "args": [1]}, None),  # no jid
    ({"class": "Outbox::Ship", "args": [1], "jid": "c" * 24, "unique_for": "an hour"}, None),
    ({"class": "Outbox::Ship", "args": [1], "jid": "c" * 24, "unique_for": 10**400}, None),
    ({"class": "Outbox::Ship", "args": [1], "jid": "c" * 24}, float("inf")),
])
def test_a_row_that_is_not_a_job_goes_to_the_dead_set_and_holds_up_no_other(
        box: wurk.Config, r: redis.Redis, engine: Engine, payload: dict[str, Any],
        at: float | None) -> None:
    """A JSON object with a field of the wrong type, or a row whose ``at`` is no time (a
    row written by hand, or by another version), raised out of every pass (KeyError,
    ValueError, OverflowError) or held its job for ever: the relay takes the oldest rows
    first, so no row after it was ever relayed."""
    text = json.dumps(payload)
    good = json.dumps({"class": "Outbox::Ship", "args": [2], "queue": "default",
                       "jid": "d" * 24})
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [
            {"jid": "x", "payload": text, "at": at, "created_at": time.time()},
            {"jid": "d" * 24, "payload": good, "at": None, "created_at": time.time()}])
    assert relay_for(box).run_once() == 2
    assert r.zrange("dead", 0, -1) == [text]
    assert [job["jid"] for job in queued(r)] == ["d" * 24]
    assert r.zcard("schedule") == 0
    assert rows(engine) == 0


def test_a_row_whose_unique_context_raises_goes_to_the_dead_set_and_holds_up_no_other(
        box: wurk.Config, r: redis.Redis, engine: Engine, sessions: scoped_session[Session],
        caplog: pytest.LogCaptureFixture) -> None:
    """A unique job's row without its digest (written by hand or by another version) names
    its lock through the job's ``unique_context`` hook, which may raise on a payload no push
    of this version made (here: no argument to take). The IndexError left every pass, so
    the row was never deleted and, oldest first, no row after it was ever relayed."""
    bad = json.dumps({"class": "Outbox::ByFirst", "args": [], "queue": "default",
                      "jid": "e" * 24, "unique_for": 60})
    good = json.dumps({"class": "Outbox::Ship", "args": [2], "queue": "default",
                       "jid": "d" * 24})
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [
            {"jid": "e" * 24, "payload": bad, "at": None, "created_at": time.time()},
            {"jid": "d" * 24, "payload": good, "at": None, "created_at": time.time()}])
    with caplog.at_level(logging.ERROR, logger="wurk"):
        assert relay_for(box).run_once() == 2
    assert r.zrange("dead", 0, -1) == [bad]
    assert [job["jid"] for job in queued(r)] == ["d" * 24]
    assert rows(engine) == 0
    assert "unique_context of 'Outbox::ByFirst' raised IndexError" in caplog.text
    # A push of this version stores the digest: the hook is not asked again when relayed.
    with sessions().begin():
        jid = by_first.perform_async(7)
    wurk.testing.relay_outbox()
    assert [job["jid"] for job in queued(r)] == [jid, "d" * 24]


def test_a_row_redis_refuses_for_good_goes_to_the_dead_set_and_holds_up_no_other(
        box: wurk.Config, r: redis.Redis, engine: Engine) -> None:
    """A queue's key of another type made Redis refuse its row's push (WRONGTYPE) on every
    pass: the rows taken with it were pushed but never deleted, and once a batch of them
    waited behind it no later row was taken at all."""
    r.set("queue:blocked", "not a list")

    def row(queue: str, jid: str) -> dict[str, Any]:
        return {"jid": jid, "at": None, "created_at": time.time(), "payload": json.dumps(
            {"class": "Outbox::Ship", "args": [1], "queue": queue, "jid": jid})}

    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [row("blocked", "a" * 24), row("default", "b" * 24)])
    assert relay_for(box).run_once() == 2
    assert [json.loads(job)["jid"] for job in r.zrange("dead", 0, -1)] == ["a" * 24]
    assert [job["jid"] for job in queued(r)] == ["b" * 24]
    assert rows(engine) == 0


def test_a_worker_relays_rows_no_commit_hook_woke(redis_server: Server, r: redis.Redis,
                                                  sessions: scoped_session[Session],
                                                  engine: Engine) -> None:
    """Rows another process committed (it died before its relay ran) go with the worker's
    poll."""
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [{"jid": "b" * 24, "payload": json.dumps({
            "class": "Outbox::Ship", "args": [5], "queue": "default", "jid": "b" * 24,
            "retry": True, "created_at": 1}), "at": None, "created_at": time.time()}])
    config = outbox_config(redis_server.url, sessions, engine, outbox_poll_interval=0.1)
    timers = Timers("test-outbox")
    duty = OutboxDuty(config, timers)
    duty.start()
    try:
        wait_until(lambda: r.llen("queue:default") == 1, what="the worker's poll")
    finally:
        duty.stop(5)
        timers.stop(5)
    assert rows(engine) == 0


def insert_jobs(engine: Engine, count: int) -> None:
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [
            {"jid": f"{n:024x}", "payload": json.dumps({
                "class": "Outbox::Ship", "args": [n], "queue": "default", "jid": f"{n:024x}",
                "retry": True, "created_at": 1}), "at": None, "created_at": time.time() + n}
            for n in range(count)])


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_workers_poll_takes_one_batch_a_turn_and_comes_back_at_once(
        redis_server: Server, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    """docs/outbox.md: the poll on the shared timer thread takes one batch a turn and, when
    it was full, comes back at once; otherwise after `outbox_poll_interval`."""
    insert_jobs(engine, 25)
    config = outbox_config(redis_server.url, sessions, engine, outbox_batch_size=10,
                           outbox_poll_interval=7.0)
    duty = OutboxDuty(config, Timers("test-outbox"))  # ticked by hand, never started
    seen = []
    for _ in range(4):
        duty._tick()
        seen.append((rows(engine), r.llen("queue:default"), duty._interval()))
    assert seen == [(15, 10, 0.0), (5, 20, 0.0), (0, 25, 7.0), (0, 25, 7.0)]


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_workers_poll_does_not_wait_on_a_pass_of_its_process(
        redis_server: Server, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    """docs/outbox.md: the poll skips its turn while the process's relay is in a pass: the
    timer thread's other duties never wait on that pass's database or Redis."""
    insert_jobs(engine, 3)
    config = outbox_config(redis_server.url, sessions, engine)
    entered, release = threading.Event(), threading.Event()

    class Slow(SQLAlchemyOutbox):
        def relay(self, limit: int, lease: float,
                  push: Callable[[list[OutboxRow]], None]) -> int:
            entered.set()
            assert release.wait(30)
            return super().relay(limit, lease, push)

    relay = relay_for(config)
    relay.store = Slow(engine, OUTBOX)
    passing = threading.Thread(target=relay.run_once)
    passing.start()
    try:
        assert entered.wait(10)
        duty = OutboxDuty(config, Timers("test-outbox"))
        assert duty.relay is relay
        started = time.monotonic()
        duty._tick()  # returns at once: the pass holds the relay
        assert time.monotonic() - started < 5 and duty._interval() == config.outbox_poll_interval
        assert rows(engine) == 3
    finally:
        release.set()
        passing.join(30)
    assert rows(engine) == 0 and r.llen("queue:default") == 3


@pytest.mark.parametrize("engine", ALL_DATABASES, indirect=True)
def test_a_relay_takes_at_most_a_batch_of_rows_oldest_first(engine: Engine) -> None:
    """docs: a relay takes at most `outbox_batch_size` rows at a time, oldest first (both
    ways of holding them: SKIP LOCKED on PostgreSQL, a claim on SQLite)."""
    from sqlalchemy import insert

    from wurk.contrib.sqlalchemy import SQLAlchemyOutbox

    with engine.begin() as conn:
        conn.execute(insert(OUTBOX), [{"jid": f"j{n:02d}", "payload": "{}", "at": None,
                                       "created_at": 1.0 + n} for n in range(7)])
    store = SQLAlchemyOutbox(engine, OUTBOX)
    batches: list[list[str]] = []
    while store.relay(3, 60.0, lambda found: batches.append([row.jid for row in found])):
        pass
    assert batches == [["j00", "j01", "j02"], ["j03", "j04", "j05"], ["j06"]]
    assert rows(engine) == 0
    defaults = wurk.Config()
    assert (defaults.outbox_batch_size, defaults.outbox_poll_interval,
            defaults.outbox_claim_timeout) == (100, 1.0, 60.0)


def test_the_outbox_client_needs_the_table(redis_server: Server,
                                           sessions: scoped_session[Session]) -> None:
    with pytest.raises(wurk.ConfigError, match="needs an adapter with an outbox table"):
        wurk.Config(client="outbox", transaction=SQLAlchemyAdapter(sessions))


def test_the_table_ddl_is_what_the_docs_show() -> None:
    """docs/outbox.md prints the PostgreSQL DDL of outbox_table(): the same, line by line."""
    from sqlalchemy import MetaData
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateTable

    page = (Path(__file__).resolve().parents[2] / "docs" / "outbox.md").read_text()
    shown = page.split("<!-- the outbox DDL -->\n```sql\n", 1)[1].split("```", 1)[0]
    made = str(CreateTable(outbox_table(MetaData())).compile(dialect=postgresql.dialect()))
    lines = [line.strip() for line in made.strip().splitlines()]
    assert [line.strip() for line in shown.strip().splitlines()] == [*lines[:-1], ");"]


def test_a_client_middleware_runs_at_the_call_and_its_payload_is_the_row(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    def stamp(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        if payload["args"] == [13]:
            raise ValueError("refused at the call")
        payload["stamped"] = "at the call"
        return call_next()

    box.client_middleware.add(stamp)
    session = sessions()
    with session.begin():
        with pytest.raises(ValueError, match="refused at the call"):
            ship.perform_async(13)
        jid = ship.perform_async(1)
        (payload,) = session.execute(select(OUTBOX.c.payload)).scalars().all()
        assert json.loads(payload)["stamped"] == "at the call"
    wait_until(lambda: queued(r), what="the relayed job")
    assert [(job["jid"], job["stamped"]) for job in queued(r)] == [(jid, "at the call")]


def test_the_default_client_pushes_at_once_even_what_a_rollback_undoes(
        redis_server: Server, r: redis.Redis, sessions: scoped_session[Session]) -> None:
    """What docs/outbox.md says of client="default", for comparison."""
    wurk.configure(redis_url=redis_server.url)
    session = sessions()
    with pytest.raises(RuntimeError), session.begin():
        ship.perform_async(1)
        raise RuntimeError("rolled back")
    assert [job["args"] for job in queued(r)] == [[1]]


def test_a_batch_member_pushes_at_once_and_writes_no_row(
        box: wurk.Config, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    """outbox.md: "for a batch member or inside a batch's jobs block, it pushes at once as
    any push does" — inside a transaction too: the batch counts it when it is pushed."""
    session = sessions()
    with session.begin():
        batch = wurk.Batch()
        with batch.jobs():
            jid = ship.perform_async(1)
        assert [job["jid"] for job in queued(r)] == [jid]
        member = wurk.push({"class": "Outbox::Ship", "args": [2], "bid": batch.bid})
        assert [job["jid"] for job in queued(r)] == [member, jid]  # a payload with a bid
        assert session.execute(select(OUTBOX.c.jid)).scalars().all() == []
        assert wurk.BatchStatus(batch.bid).total == 1


def test_a_missing_table_raises_at_the_call_and_the_transaction_rolls_back(
        redis_server: Server, r: redis.Redis, tmp_path: Path) -> None:
    """outbox.md: "The table missing (migration not run): the push raises at the call (no
    such table) and the transaction rolls back: loud, never a lost job"."""

    engine = create_engine(f"sqlite:///{tmp_path / 'unmigrated.db'}")
    Order.__table__.create(engine)  # the application's table, not wurk_outbox
    registry = scoped_session(sessionmaker(engine))
    try:
        outbox_config(redis_server.url, registry, engine)
        session = registry()
        with pytest.raises(DBAPIError, match="no such table: wurk_outbox"), session.begin():
            session.add(Order(item="book"))
            session.flush()
            ship.perform_async(1)
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(Order)).scalar_one() == 0
        assert queued(r) == []
    finally:
        registry.remove()
        engine.dispose()


def test_a_row_with_a_null_or_non_text_payload_is_dropped_and_holds_up_no_other(
        box: wurk.Config, r: redis.Redis, engine: Engine,
        caplog: pytest.LogCaptureFixture) -> None:
    """A row written by hand or by an older schema (a nullable ``payload``; SQLite keeps
    any type in any column): a NULL or a number reached the payload parser as no text and
    raised TypeError out of every pass, so the row was never deleted and, oldest first,
    no row after it was ever relayed."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("ALTER TABLE wurk_outbox ALTER COLUMN payload DROP NOT NULL")
        else:
            conn.exec_driver_sql("DROP TABLE wurk_outbox")
            conn.exec_driver_sql(
                "CREATE TABLE wurk_outbox (id INTEGER PRIMARY KEY, jid VARCHAR(64), payload,"
                " at FLOAT, created_at FLOAT, claimed_by VARCHAR(64), claimed_until FLOAT)")
        values = ["NULL"] + (["42"] if engine.dialect.name == "sqlite" else [])
        for value in values:
            conn.exec_driver_sql(f"INSERT INTO wurk_outbox (jid, payload, created_at) "
                                 f"VALUES ('x', {value}, 0)")
    good = json.dumps({"class": "Outbox::Ship", "args": [2], "queue": "default",
                       "jid": "d" * 24})
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [{"jid": "d" * 24, "payload": good, "at": None,
                                        "created_at": time.time()}])
    with caplog.at_level(logging.ERROR, logger="wurk"):
        assert relay_for(box).run_once() == len(values) + 1
    assert [job["jid"] for job in queued(r)] == ["d" * 24]
    assert rows(engine) == 0
    assert r.zrange("dead", 0, -1) == (["42"] if len(values) > 1 else [])
    assert "row 1 has no payload" in caplog.text


def test_a_row_not_a_job_when_the_dead_set_refuses_it_too_holds_up_no_other(
        box: wurk.Config, r: redis.Redis, engine: Engine,
        caplog: pytest.LogCaptureFixture) -> None:
    """A row that is no job, while the dead set's key holds another type (written by hand):
    its move to the dead set raised WRONGTYPE out of every pass, so the good rows taken
    with it were pushed on every pass and never deleted, and no later row was taken. It is
    now logged with its text and dropped, as reliable push does with such a job."""
    r.set("dead", "not a sorted set")
    good = json.dumps({"class": "Outbox::Ship", "args": [2], "queue": "default",
                       "jid": "d" * 24})
    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [
            {"jid": "x", "payload": "{not json", "at": None, "created_at": time.time()},
            {"jid": "d" * 24, "payload": good, "at": None, "created_at": time.time()}])
    with caplog.at_level(logging.ERROR, logger="wurk"):
        assert relay_for(box).run_once() == 2
    assert [job["jid"] for job in queued(r)] == ["d" * 24]
    assert rows(engine) == 0
    assert "{not json" in caplog.text


# -- a job larger than the server takes (its proto-max-bulk-len) ---------------------------------
BULK_LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of the test's own whose limit is Redis's least (1 MB): small payloads."""
    server = small_bulk_server(tmp_path_factory.mktemp("small-bulk"))
    yield server
    server.stop()


@pytest.fixture
def small_box(small_server: Server, sessions: scoped_session[Session], engine: Engine
              ) -> Iterator[tuple[wurk.Config, redis.Redis]]:
    client = redis.Redis.from_url(small_server.url, decode_responses=True)
    client.flushall()
    config = outbox_config(small_server.url, sessions, engine)
    yield config, client
    relay_for(config).stop()
    client.close()


def test_a_push_too_large_raises_at_the_call_and_writes_no_row(
        small_box: tuple[wurk.Config, redis.Redis], sessions: scoped_session[Session],
        engine: Engine) -> None:
    """The row was written, and its relay then failed at every pass: the job could never
    reach Redis, and the rows behind it waited for ever."""
    _, small = small_box
    session = sessions()
    with session.begin():
        with pytest.raises(wurk.PayloadTooLarge, match="proto-max-bulk-len"):
            ship.perform_async("x" * (BULK_LIMIT + 100))
        assert session.execute(select(OUTBOX.c.jid)).scalars().all() == []
    assert rows(engine) == 0
    assert small.dbsize() == 0


def test_a_row_too_large_is_deleted_with_a_log_and_holds_up_no_other(
        small_box: tuple[wurk.Config, redis.Redis], engine: Engine,
        caplog: pytest.LogCaptureFixture) -> None:
    """A row written before the server's limit was lowered (or by an older version): Redis
    refuses it, or cuts the connection, at every pass; no value that size fits the dead set
    either. It is deleted, logged with its jid, and the row after it is relayed."""
    box, small = small_box

    def row(jid: str, arg: str) -> dict[str, Any]:
        return {"jid": jid, "at": None, "created_at": time.time(), "payload": json.dumps(
            {"class": "Outbox::Ship", "args": [arg], "queue": "default", "jid": jid})}

    with engine.begin() as conn:
        conn.execute(OUTBOX.insert(), [row("a" * 24, "x" * (2 * BULK_LIMIT)),
                                       row("b" * 24, "fine")])
    with caplog.at_level(logging.ERROR, logger="wurk"):
        assert relay_for(box).run_once() == 2
    assert [job["jid"] for job in queued(small)] == ["b" * 24]
    assert rows(engine) == 0
    assert small.zcard("dead") == 0
    assert f"(jid {'a' * 24}) is" in caplog.text and "the row is deleted" in caplog.text


def test_a_push_to_another_shard_goes_there_and_is_refused_as_a_row(
        redis_server: Server, r: redis.Redis, sessions: scoped_session[Session],
        engine: Engine) -> None:
    """The shard option is kept outside a transaction; inside one a row could only be
    relayed into the default shard (rows name no shard), so the push is refused at the
    call, never sent to the wrong Redis."""
    eu_url = redis_server.url.rsplit("/", 1)[0] + "/1"
    eu = redis.Redis.from_url(eu_url, decode_responses=True)
    eu.flushdb()
    config = outbox_config(redis_server.url, sessions, engine, shards={"eu": eu_url})
    try:
        ship.set(shard="eu").perform_async(1)
        ship.set(shard="eu").perform_bulk([[2], [3]])
        assert queued(r) == []
        assert sorted(job["args"] for job in queued(eu)) == [[1], [2], [3]]
        session = sessions()
        with session.begin():
            with pytest.raises(wurk.ConfigError, match="'eu'"):
                ship.set(shard="eu").perform_async(4)
            with pytest.raises(wurk.ConfigError, match="'eu'"):
                ship.set(shard="eu").perform_bulk([[5]])
            ship.set(shard="eu", transactional=False).perform_async(6)
            ship.perform_async(7)  # the default shard's: a row, as ever
            assert session.execute(select(func.count()).select_from(OUTBOX)).scalar_one() == 1
        wurk.testing.relay_outbox()
        assert [job["args"] for job in queued(r)] == [[7]]
        assert sorted(job["args"] for job in queued(eu)) == [[1], [2], [3], [6]]
        assert rows(engine) == 0
    finally:
        relay_for(config).stop()
        eu.flushdb()
        eu.close()


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)  # SQLite: its busy timeout
def test_a_lock_on_the_table_holds_a_relay_no_longer_than_its_lock_timeout(
        box: wurk.Config, r: redis.Redis, engine: Engine, pg_url: str) -> None:
    """A lock on the whole table (a migration, ``LOCK TABLE``, ``VACUUM FULL``) held a
    relay's transaction for as long as it lasted: a worker's poll runs on its shared timer
    thread, so the leader's renewal and the scheduler waited with it. The wait is bounded:
    the pass fails (an outage, retried) and the next one after the lock relays the rows."""
    import psycopg

    from wurk.client.outbox import LOCK_TIMEOUT, Relay

    insert_jobs(engine, 1)
    relay = Relay(box, SQLAlchemyOutbox(engine, OUTBOX))
    outcome: list[BaseException | bool] = []

    def poll() -> None:
        try:
            outcome.append(relay.poll())
        except BaseException as exc:
            outcome.append(exc)

    with psycopg.connect(pg_url) as migration:  # a transaction holding the table's lock
        migration.execute("LOCK TABLE wurk_outbox IN ACCESS EXCLUSIVE MODE")
        polling = threading.Thread(target=poll, daemon=True)
        started = time.monotonic()
        polling.start()
        polling.join(LOCK_TIMEOUT + 20)
        waited = time.monotonic() - started
        held = polling.is_alive()  # still waiting while the lock is held
    polling.join(30)
    assert not held, "the relay waited for the table's lock as long as it was held"
    assert waited >= LOCK_TIMEOUT * 0.9
    (failed,) = outcome
    assert isinstance(failed, Exception) and "lock timeout" in str(failed)
    assert rows(engine) == 1 and r.llen("queue:default") == 0
    assert relay.poll() is False  # the lock gone: relayed
    assert rows(engine) == 0 and r.llen("queue:default") == 1


@pytest.mark.parametrize("engine", ALL_DATABASES, indirect=True)
def test_a_relay_locks_rows_where_the_server_has_skip_locked_and_claims_them_elsewhere(
        engine: Engine) -> None:
    """docs/outbox.md: SKIP LOCKED on PostgreSQL and MariaDB (this server, 10.6 or later),
    the claim column on SQLite. A MariaDB before 10.6 or a MySQL before 8.0.1 takes no SKIP
    LOCKED (a syntax error): the dialect's name alone made every pass of such a relay fail."""
    from sqlalchemy.dialects import mysql, postgresql, sqlite

    from wurk.contrib.sqlalchemy import skips_locked

    store = SQLAlchemyOutbox(engine, OUTBOX)
    assert store.relay(10, 60.0, lambda found: None) == 0  # connected: the version is known
    assert store.skip_locked is (engine.dialect.name != "sqlite")

    def server(version: tuple[int, ...], mariadb: bool) -> Any:
        dialect = mysql.pymysql.dialect()
        dialect.server_version_info, dialect.is_mariadb = version, mariadb
        return dialect

    assert [skips_locked(server(version, True)) for version in [(10, 5, 22), (10, 6, 0)]] \
        == [False, True]
    assert [skips_locked(server(version, False)) for version in [(5, 7, 44), (8, 0, 1)]] \
        == [False, True]
    assert skips_locked(postgresql.psycopg.dialect()) and not skips_locked(sqlite.dialect())
