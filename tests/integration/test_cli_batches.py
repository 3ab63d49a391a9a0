"""``wurk batches`` through ``wurk.cli.run``: the list, one batch, dead batches, actions."""

from __future__ import annotations

import json
import time

import pytest
import redis

import wurk
from tests.integration.test_cli_inspect import cli
from wurk.api import DeadSet
from wurk.batch import accounting, model
from wurk.batch.model import new_bid


@wurk.job(name="CliBatch::work")
def work(n: int) -> None: ...


def make(config: wurk.Config, jobs: int, **options: object) -> tuple[wurk.Batch, list[str]]:
    batch = wurk.Batch(**options)  # type: ignore[arg-type]
    batch.on("success", work, {"n": 1})
    with batch.jobs():
        jids = [str(work.perform_async(n)) for n in range(jobs)]
    return batch, jids


def test_list_and_json(config: wurk.Config, capsys: pytest.CaptureFixture[str]) -> None:
    batch, _ = make(config, 3, description="nightly import", tags=["import"])
    code, out, _ = cli(capsys, "batches")
    assert code == 0 and batch.bid in out and "nightly import" in out and "running" in out
    code, out, _ = cli(capsys, "batches", "--json")
    assert code == 0 and json.loads(out)[0]["total"] == 3
    code, out, _ = cli(capsys, "batches", "--tag", "imp")
    assert code == 0 and batch.bid in out
    code, out, _ = cli(capsys, "batches", "--tag", "nothing-like-it")
    assert code == 0 and "No batch has that tag." in out


def test_show_dead_retry_delete(config: wurk.Config, r: redis.Redis,
                                capsys: pytest.CaptureFixture[str]) -> None:
    batch, jids = make(config, 2, description="with a death")
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, jids[0], "death")
    DeadSet(config).schedule(time.time(), {"class": "CliBatch::work", "args": [0],
                                           "queue": "default", "jid": jids[0], "bid": batch.bid,
                                           "retry": True, "error_class": "RuntimeError",
                                           "error_message": "x", "failed_at": time.time()})
    code, out, _ = cli(capsys, "batches", "show", batch.bid)
    assert code == 0 and f"Dead jobs: {jids[0]}" in out and "Callback on success" in out
    code, out, _ = cli(capsys, "batches", "dead")
    assert code == 0 and batch.bid in out and "dead jobs" in out
    r.delete("queue:default")
    code, out, _ = cli(capsys, "batches", "retry", batch.bid)
    assert code == 0 and "1 dead job of batch" in out and r.llen("queue:default") == 1
    code, _, err = cli(capsys, "batches", "delete", batch.bid)
    assert code == 1 and "--yes" in err and wurk.BatchStatus(batch.bid).exists
    code, out, _ = cli(capsys, "batches", "delete", batch.bid, "--yes")
    assert code == 0 and not wurk.BatchStatus(batch.bid).exists
    code, _, err = cli(capsys, "batches", "show", batch.bid)
    assert code == 1 and "no batch" in err


def test_garbage_is_shown_not_raised(config: wurk.Config, r: redis.Redis,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    batch, _ = make(config, 1)
    r.hset(f"b-{batch.bid}", "total", "lots")
    code, out, _ = cli(capsys, "batches")
    assert code == 0 and "invalid (lots)" in out
    code, out, _ = cli(capsys, "batches", "show", batch.bid, "--json")
    assert code == 0 and json.loads(out)["invalid"]["/total"] == "lots"


def test_a_batch_id_that_begins_with_a_dash(config: wurk.Config,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Sidekiq Pro's bids are URL-safe base64 and may begin with '-', which a command line
    reads as an option: after '--' it is a batch id, and without it the error says so.
    wurk's own bids never begin with one."""
    bid = "-yAbCdEfGhIjKl"  # as Pro may make one; '-y' is also delete's short option
    monkeypatch.setattr(model, "new_bid", lambda: bid)
    assert make(config, 1)[0].bid == bid
    code, out, _ = cli(capsys, "batches", "show", "--", bid, "--json")
    assert code == 2  # options go before '--': everything after it is arguments
    code, out, _ = cli(capsys, "batches", "show", "--json", "--", bid)
    assert code == 0 and json.loads(out)["bid"] == bid
    code, _, err = cli(capsys, "batches", "show", bid)
    assert code == 2
    assert "A batch id that begins with '-' goes after '--': wurk batches show -- -" in err
    code, _, err = cli(capsys, "batches", "delete", bid, "--yes")
    assert code == 2 and "wurk batches delete -- -" in err
    code, out, _ = cli(capsys, "batches", "delete", "--yes", "--", bid)
    assert code == 0 and f"Batch {bid} deleted." in out
    assert not any(new_bid().startswith("-") for _ in range(5_000))  # 1 in 64 did
