"""Batches under wurk.testing's fake and inline modes: the batch lives in Redis as in
production, its jobs go to the mode's sink, and no callback fires before its time."""

from __future__ import annotations

from typing import Any

import pytest

import wurk
import wurk.testing

runs: list[str] = []


class Steps(wurk.Job, name="ModeBatch::Steps"):
    def on_complete(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        runs.append("complete")

    def on_success(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        runs.append("success")


@wurk.job(name="ModeBatch::step")
def step(n: int) -> None:
    runs.append(f"job {n}")


@pytest.fixture(autouse=True)
def _clean() -> Any:
    runs.clear()
    wurk.testing.clear_all()
    yield
    wurk.testing.clear_all()


def watched() -> wurk.Batch:
    batch = wurk.Batch()
    batch.on("complete", Steps).on("success", Steps)
    return batch


def test_fake_mode_fires_only_once_every_job_was_drained(config: wurk.Config) -> None:
    with wurk.testing.fake():
        batch = watched()
        with batch.jobs():
            step.perform_async(1)
            step.perform_async(2)
        assert [j["class"] for j in wurk.testing.jobs()] == ["ModeBatch::step"] * 2
        assert wurk.BatchStatus(batch.bid).total == 2
        wurk.testing.perform_one()
        assert runs == ["job 1"]  # one job left: nothing fired
        assert not wurk.BatchStatus(batch.bid).complete
        wurk.testing.drain_all()  # the second job, then the callbacks it fired
    assert runs[0:2] == ["job 1", "job 2"] and sorted(runs[2:]) == ["complete", "success"]
    assert wurk.BatchStatus(batch.bid).succeeded
    assert wurk.testing.jobs() == []


def test_inline_mode_fires_when_the_block_ends_not_before(config: wurk.Config) -> None:
    with wurk.testing.inline():
        batch = watched()
        with batch.jobs():
            step.perform_async(1)
            step.perform_async(2)
            assert runs == ["job 1", "job 2"]  # ran at push, nothing fired yet
        assert runs[0:2] == ["job 1", "job 2"] and sorted(runs[2:]) == ["complete", "success"]
    status = wurk.BatchStatus(batch.bid)
    assert status.succeeded and (status.total, status.pending) == (2, 0)


def test_an_empty_block_in_fake_mode(config: wurk.Config) -> None:
    with wurk.testing.fake():
        batch = watched()
        with batch.jobs():
            pass
        assert [j["class"] for j in wurk.testing.jobs()] == ["Sidekiq::Batch::Empty"]
        wurk.testing.drain_all()
    assert sorted(runs) == ["complete", "success"]


class _Deferring:
    """A transaction that is always open: every deferred push waits for commit()."""

    def __init__(self) -> None:
        self.pending: list[Any] = []

    def after_commit(self, callback: Any) -> bool:
        self.pending.append(callback)
        return True

    def commit(self) -> None:
        for callback in self.pending:
            callback()
        self.pending.clear()


def test_a_transactional_client_pushes_batch_jobs_at_once(redis_server: Any) -> None:
    adapter = _Deferring()
    config = wurk.configure(redis_url=redis_server.url, client="transactional",
                            transaction=adapter)
    step.perform_async(0)  # outside a batch: deferred to the commit
    batch = wurk.Batch()
    with batch.jobs():
        step.perform_async(1)  # inside: joins the batch now
    assert len(adapter.pending) == 1
    assert wurk.BatchStatus(batch.bid, config=config).total == 1
