"""Batches: ``autoflush`` (a jobs block's pushes written N at a time) and ``remove_jobs`` (jobs
taken out of a batch's counts), against the real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import redis

import wurk
import wurk.testing
from tests.helpers.faults import config_for
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from tests.helpers.wait import wait_until
from wurk.batch import accounting
from wurk.errors import RedisUnavailable


@wurk.job(name="Autoflush::work")
def work(n: int) -> None:
    """Does nothing: what is counted is the batch's bookkeeping."""


@wurk.job(name="Autoflush::unique", unique_for=600)
def unique_work(n: int) -> None:
    """A unique job: never held, its push must learn whether it was a duplicate."""


class Done(wurk.Job, name="Autoflush::Done"):
    def on_complete(self, status: wurk.BatchStatus, options: dict[str, object]) -> None:
        with wurk.redis() as conn:
            conn.call("RPUSH", "fired", f"complete:{status.bid}")

    def on_success(self, status: wurk.BatchStatus, options: dict[str, object]) -> None:
        with wurk.redis() as conn:
            conn.call("RPUSH", "fired", f"success:{status.bid}")


def counts(bid: str) -> tuple[object, object, object]:
    status = wurk.BatchStatus(bid)
    return status.total, status.pending, status.failures


def queued(r: redis.Redis) -> int:
    return int(r.llen("queue:default"))


def callbacks(r: redis.Redis) -> list[str]:
    """The events of the callback jobs waiting in the default queue."""
    jobs = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    return sorted(job["args"][0] for job in jobs if job["class"] == "wurk.batch.Callback")


# -- autoflush --------------------------------------------------------------------------------
def test_pushes_are_written_n_at_a_time_and_the_rest_at_the_end(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    batch = wurk.Batch(autoflush=3)
    seen: list[tuple[int, object]] = []
    with batch.jobs():
        for n in range(7):
            assert work.perform_async(n) is not None  # a jid at once, written or not
            seen.append((queued(r), wurk.BatchStatus(batch.bid).total))
    assert seen == [(0, 0), (0, 0), (3, 3), (3, 3), (3, 3), (6, 6), (6, 6)]
    assert queued(r) == 7 and counts(batch.bid) == (7, 7, 0)  # the placeholder is gone
    assert all(json.loads(raw)["bid"] == batch.bid for raw in r.lrange("queue:default", 0, -1))


def test_an_empty_block_still_writes_its_no_op_job(config: wurk.Config,
                                                   r: redis.Redis) -> None:
    batch = wurk.Batch(autoflush=5)
    with batch.jobs():
        pass
    (only,) = [json.loads(raw)["class"] for raw in r.lrange("queue:default", 0, -1)]
    assert only == "Sidekiq::Batch::Empty" and counts(batch.bid) == (1, 1, 0)


def test_a_block_that_raises_still_writes_and_counts_what_it_pushed(
        config: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch(autoflush=10)
    with pytest.raises(KeyError), batch.jobs():
        work.perform_async(1)
        work.perform_async(2)
        assert queued(r) == 0
        raise KeyError("boom")
    assert queued(r) == 2 and counts(batch.bid) == (2, 2, 0)
    empty = wurk.Batch(autoflush=10)
    with pytest.raises(KeyError), empty.jobs():
        raise KeyError("nothing pushed")
    assert not r.exists(f"b-{empty.bid}")  # nothing to wait for: no batch, as without it


def test_a_batch_held_by_autoflush_completes_exactly_once(config: wurk.Config,
                                                          r: redis.Redis) -> None:
    batch = wurk.Batch(autoflush=4)
    batch.on("complete", Done).on("success", Done)
    with batch.jobs():
        jids = [work.perform_async(n) for n in range(10)]
        with wurk.redis() as conn:  # jobs written so far finish while the block holds more
            for jid in jids[:8]:
                accounting.record(conn, config, batch.bid, str(jid), "success")
        assert callbacks(r) == [] and counts(batch.bid) == (8, 1, 0)
    assert counts(batch.bid) == (10, 2, 0) and callbacks(r) == []
    with wurk.redis() as conn:
        for jid in jids[8:]:
            accounting.record(conn, config, batch.bid, str(jid), "success")
    assert counts(batch.bid) == (10, 0, 0) and callbacks(r) == ["complete", "success"]


def test_a_flush_redis_refuses_names_every_job_and_counts_none(redis_server: Server,
                                                              r: redis.Redis) -> None:
    with FaultProxy(redis_server.port) as proxy:
        config = config_for(proxy.url, socket_timeout=1)
        try:
            batch = wurk.Batch(autoflush=3, config=config)
            with batch.jobs():
                work.set(config=config).perform_async(1)
                work.set(config=config).perform_async(2)
                proxy.cut()
                proxy.drop()
                with pytest.raises(RedisUnavailable, match="could not push 3 jobs") as raised:
                    work.set(config=config).perform_async(3)  # the third: a flush, refused
                proxy.restore()
        finally:
            config.close()
    assert "Nothing was kept to retry later" in str(raised.value)
    (only,) = [json.loads(raw)["class"] for raw in r.lrange("queue:default", 0, -1)]
    assert only == "Sidekiq::Batch::Empty"  # the block pushed nothing that arrived
    assert counts(batch.bid)[0] == 1


def test_a_failed_flush_after_a_raise_is_reported_and_the_raise_wins(
        config: wurk.Config, r: redis.Redis) -> None:
    reported: list[str] = []
    config.error_handlers.append(lambda exc, context: reported.append(context["context"]))
    batch = wurk.Batch(autoflush=10)
    with pytest.raises(KeyError, match="the block's own"), batch.jobs():
        work.perform_async(1)
        work.perform_async(2)
        batch.delete()  # the two held jobs now have no batch to join
        raise KeyError("the block's own")
    assert reported == [f"writing the 2 jobs held by a jobs block of batch {batch.bid} that "
                        "raised"]
    assert r.llen("queue:default") == 0


def test_a_unique_job_goes_out_at_once_with_what_was_held(config: wurk.Config,
                                                          r: redis.Redis) -> None:
    batch = wurk.Batch(autoflush=100)
    with batch.jobs():
        work.perform_async(1)
        assert unique_work.perform_async(1) is not None
        assert queued(r) == 2  # the held job went with it
        assert unique_work.perform_async(1) is None  # a duplicate, known at its push
        work.perform_async(2)
    assert counts(batch.bid) == (3, 3, 0) and queued(r) == 3


def test_async_pushes_are_held_and_flushed_too(config: wurk.Config, r: redis.Redis) -> None:
    async def push(batch: wurk.Batch) -> list[int]:
        sizes = []
        with batch.jobs():
            for n in range(5):
                await work.aperform_async(n)
                sizes.append(queued(r))
        return sizes

    batch = wurk.Batch(autoflush=2)
    assert asyncio.run(push(batch)) == [0, 2, 2, 4, 4]
    assert queued(r) == 5 and counts(batch.bid) == (5, 5, 0)


def test_autoflush_under_a_testing_mode_holds_nothing(config: wurk.Config) -> None:
    wurk.testing.clear_all()
    with wurk.testing.fake():
        batch = wurk.Batch(autoflush=50)
        with batch.jobs():
            work.perform_async(1)
            assert len(wurk.testing.jobs()) == 1
            assert wurk.BatchStatus(batch.bid).total == 1
    wurk.testing.clear_all()


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_autoflush_must_be_a_positive_whole_number(bad: object) -> None:
    with pytest.raises(wurk.BatchError, match="autoflush"):
        wurk.Batch(autoflush=bad)  # type: ignore[arg-type]


# -- remove_jobs ------------------------------------------------------------------------------
def test_removed_jobs_no_longer_count(config: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch()
    batch.on("complete", Done).on("success", Done)
    with batch.jobs():
        jids = [str(work.perform_async(n)) for n in range(4)]
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, jids[0], "success")
        accounting.record(conn, config, batch.bid, jids[1], "failure")
    assert counts(batch.bid) == (4, 3, 1)
    assert batch.remove_jobs(jids[0], jids[1], "not-a-job-of-it", jids[1]) == 1  # 0 succeeded
    assert counts(batch.bid) == (3, 2, 0) and wurk.BatchStatus(batch.bid).failed_jids == []
    assert batch.remove_jobs(jids[1]) == 0 and batch.remove_jobs() == 0
    with wurk.redis() as conn:  # a removed job that runs after all changes nothing
        assert not accounting.record(conn, config, batch.bid, jids[1], "success")
    assert callbacks(r) == []
    assert batch.remove_jobs(jids[2], jids[3]) == 2  # the last pending ones: it is done
    assert counts(batch.bid) == (1, 0, 0) and callbacks(r) == ["complete", "success"]
    assert wurk.BatchStatus(batch.bid).succeeded


def test_a_removed_dead_job_leaves_the_dead_batches(config: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch()
    with batch.jobs():
        doomed, other = str(work.perform_async(1)), str(work.perform_async(2))
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, doomed, "death")
    assert r.sismember("batch-died", batch.bid) and counts(batch.bid) == (2, 2, 1)
    assert batch.remove_jobs(doomed) == 1
    assert not r.sismember("batch-died", batch.bid) and counts(batch.bid) == (1, 1, 0)
    assert wurk.BatchStatus(batch.bid).dead_jids == []
    assert wurk.Batch(batch.bid).remove_jobs(other) == 1  # by bid, from anywhere
    assert wurk.BatchStatus(batch.bid).succeeded


def test_remove_jobs_of_a_batch_that_is_gone_or_bad_jids(config: wurk.Config) -> None:
    assert wurk.Batch("no-such-batch").remove_jobs("a" * 24) == 0
    with pytest.raises(wurk.BatchError, match="jids"):
        wurk.Batch("no-such-batch").remove_jobs("")


@pytest.fixture
def worker(redis_server: Server) -> Iterator[wurk.Config]:
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, shutdown_grace=0.5, concurrency=4)
    with wurk.InProcessWorker(config):
        yield config


def test_a_worker_completes_an_autoflushed_batch_once(worker: wurk.Config,
                                                      r: redis.Redis) -> None:
    batch = wurk.Batch(autoflush=7)
    batch.on("complete", Done).on("success", Done)
    with batch.jobs():
        work.perform_bulk([[n] for n in range(5)])  # one bulk push past N: written at once
        for n in range(20):
            work.perform_async(n)
    wait_until(lambda: r.llen("fired") >= 2)
    assert sorted(r.lrange("fired", 0, -1)) == [f"complete:{batch.bid}", f"success:{batch.bid}"]
    assert counts(batch.bid) == (25, 0, 0)
