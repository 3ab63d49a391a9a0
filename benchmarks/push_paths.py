"""What a push costs on each path, side by side in one run: a plain push, reliable push
(``memory``, ``disk``) with Redis up and with Redis unreachable, and a push inside a database
transaction — a transaction writing one row of its own alone, then with the on_commit push
(``client="transactional"``) and with the outbox (``client="outbox"``) — on SQLite (a file)
and on PostgreSQL (a private cluster, fsync on) when it is installed.

    python -m benchmarks.push_paths [--jobs 2000] [--runs 3] [--no-postgres]

For each path: µs per push (the caller's time: for a transaction, its whole ``with
Session.begin()`` block, commit included), and per push the requests written to Redis
(a command or a pipeline: ``benchmarks._trips``) and to the database (statements, ``BEGIN``
and ``COMMIT``, counted by SQLAlchemy's engine events) — those of the outbox's relay, which
runs on its own thread as in a web process, included. The outbox's row also says when the
last job reached Redis (µs per push from the first transaction to the last relayed job).
Medians of ``--runs``; the paths take turns within each run, so a loaded machine weighs on
each alike. Uses REDIS_URL when set (its data is flushed!), else starts a private server.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Engine, Integer, String, create_engine, event
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    mapped_column,
    scoped_session,
    sessionmaker,
)

import wurk
from benchmarks._server import ROOT, redis_url
from benchmarks._trips import RoundTrips
from wurk.client import reliable
from wurk.client.default import default_client
from wurk.client.outbox import relay_for
from wurk.contrib.sqlalchemy import SQLAlchemyAdapter, outbox_table

JOB = {"class": "Bench::Ship", "args": [4711, "book"]}


class Base(DeclarativeBase):
    pass


OUTBOX = outbox_table(Base.metadata)


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item: Mapped[str] = mapped_column(String(50))


@dataclass
class Sample:
    us: float  # the caller's µs per push
    redis: float  # requests to Redis per push
    db: float  # statements, BEGIN and COMMIT per push
    landed_us: float | None = None  # µs per push until the last one was in Redis


class DbCount:
    """Requests an engine sends: every statement, every BEGIN and COMMIT (any thread)."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        for name in ("before_cursor_execute", "begin", "commit", "rollback"):
            event.listen(engine, name, self._one)

    def _one(self, *_: Any) -> None:
        self.count += 1


class Database:
    """An engine, its sessions, and a configuration of each transaction mode on it."""

    def __init__(self, name: str, url: str, redis_url: str) -> None:
        self.name = name
        self.engine = create_engine(url)
        Base.metadata.create_all(self.engine)
        self.sessions = scoped_session(sessionmaker(self.engine))
        self.db = DbCount(self.engine)
        self.configs = {
            mode: wurk.Config(redis_url=redis_url, client=mode, transaction=SQLAlchemyAdapter(
                self.sessions, outbox=OUTBOX, engine=self.engine))
            for mode in ("default", "transactional", "outbox")}

    def transactions(self, mode: str, jobs: int) -> None:
        client = default_client(self.configs[mode])
        session = self.sessions()
        for n in range(jobs):
            with session.begin():
                session.add(Order(item=f"book {n}"))
                if mode != "default":  # "default" here: the transaction alone, no push
                    client.push(JOB)

    def close(self) -> None:
        for config in self.configs.values():
            if config.client == "outbox":
                relay_for(config).stop()
            config.close()
        self.sessions.remove()
        self.engine.dispose()


def timed(r: redis.Redis, trips: RoundTrips, db: DbCount | None, jobs: int,
          run: Callable[[], None], *, landed: int | None = None) -> Sample:
    """``run`` once: the caller's time and the requests per push; with ``landed``, also
    until that many jobs are in ``queue:default``."""
    r.flushdb()
    before_redis, before_db = trips.count, db.count if db is not None else 0
    start = time.perf_counter()
    run()
    caller = time.perf_counter() - start
    landed_us = None
    if landed is not None:
        deadline = time.monotonic() + 120
        while r.llen("queue:default") < landed:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {r.llen('queue:default')} of {landed} jobs relayed")
            time.sleep(0.001)
        landed_us = (time.perf_counter() - start) / jobs * 1e6
        time.sleep(0.05)  # the relay's last DELETE and COMMIT, counted below
    db_count = (db.count - before_db) / jobs if db is not None else 0.0
    return Sample(caller / jobs * 1e6, (trips.count - before_redis) / jobs, db_count, landed_us)


def pushes(config: wurk.Config, jobs: int) -> Callable[[], None]:
    client = default_client(config)

    def run() -> None:
        for _ in range(jobs):
            client.push(JOB)
    return run


@contextlib.contextmanager
def postgres(enabled: bool) -> Iterator[str | None]:
    """A private cluster with fsync on (``tests.helpers.postgres``), or None."""
    if not enabled:
        yield None
        return
    sys.path.insert(0, str(ROOT))
    from tests.helpers.postgres import start_cluster

    try:
        cluster = start_cluster(durable=True)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"PostgreSQL left out: {exc}")
        yield None
        return
    try:
        yield cluster.database("push_paths").replace("postgresql://", "postgresql+psycopg://")
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    options = parser.parse_args()
    jobs = options.jobs
    scratch = Path(tempfile.mkdtemp(prefix="wurk-push-paths-"))
    stack = contextlib.ExitStack()
    try:
        url = stack.enter_context(redis_url())
        pg_url = stack.enter_context(postgres(not options.no_postgres))
        r = redis.Redis.from_url(url)
        trips = RoundTrips()
        stack.enter_context(trips.counting())
        # Nothing listens here: every try is refused at once.
        down = f"redis://127.0.0.1:{_closed_port()}/0"
        configs = {
            "plain push": wurk.Config(redis_url=url),
            "reliable memory": wurk.Config(redis_url=url, reliable_push="memory"),
            "reliable disk": wurk.Config(redis_url=url, reliable_push="disk",
                                         reliable_push_dir=str(scratch / "up")),
            "reliable memory, Redis down": wurk.Config(
                redis_url=down, reliable_push="memory", reliable_push_size=jobs * 10),
            "reliable disk, Redis down": wurk.Config(
                redis_url=down, reliable_push="disk", reliable_push_size=jobs * 10,
                reliable_push_dir=str(scratch / "down")),
        }
        databases = [Database("SQLite", f"sqlite:///{scratch / 'shop.db'}", url)]
        if pg_url is not None:
            databases.append(Database("PostgreSQL", pg_url, url))
        rows: dict[str, list[Sample]] = {}
        for _ in range(options.runs):
            for name, config in configs.items():
                rows.setdefault(name, []).append(timed(r, trips, None, jobs,
                                                       pushes(config, jobs)))
            for database in databases:
                for mode, label in (("default", "transaction, no push"),
                                    ("transactional", "+ on_commit push"),
                                    ("outbox", "+ outbox push")):
                    sample = timed(r, trips, database.db, jobs,
                                   functools.partial(database.transactions, mode, jobs),
                                   landed=jobs if mode != "default" else None)
                    rows.setdefault(f"{database.name}: {label}", []).append(sample)
        print(f"push paths, {jobs} pushes, median of {options.runs} runs")
        print(f"{'path':<34}{'µs/push':>9}{'Redis':>7}{'DB':>6}{'in Redis':>10}")
        for name, samples in rows.items():
            landed = [s.landed_us for s in samples if s.landed_us is not None]
            print(f"{name:<34}{statistics.median(s.us for s in samples):>9.0f}"
                  f"{statistics.median(s.redis for s in samples):>7.2f}"
                  f"{statistics.median(s.db for s in samples):>6.2f}"
                  + (f"{statistics.median(landed):>10.0f}" if landed else ""))
        print("Redis, DB: requests per push; in Redis: µs per push until the last job was "
              "in Redis")
        for database in databases:
            database.close()
        for writer in list(reliable._writers):  # the kept jobs of the Redis-down paths
            writer.buffer.done([entry.job.jid for entry in writer.buffer.take(jobs * 10)])
            writer.close()
    finally:
        stack.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _closed_port() -> int:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.server import free_port

    return free_port()


if __name__ == "__main__":
    main()
