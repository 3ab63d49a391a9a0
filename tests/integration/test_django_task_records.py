"""The task records of the ``django.tasks`` backend (``wurk.contrib.django.results``), as
stored in Redis: no Django needed to read or write them."""

from __future__ import annotations

import redis

import wurk
from wurk.contrib.django.results import ResultStore


def test_an_update_never_overwrites_a_write_made_between_its_read_and_its_write(
        config: wurk.Config, r: redis.Redis) -> None:
    """``update`` read the record, changed it and wrote it back in three steps: a write by
    another in between (a death handler, a second run after a recovery) was overwritten
    with the stale copy. The change now runs again on what the other one wrote."""
    store = ResultStore(config)
    store.save("t1", {"task": "app.tasks.f", "status": "RUNNING", "errors": []})

    def fail(record: dict[str, object]) -> None:
        if not record["errors"]:  # the first try: another writer lands meanwhile
            store.update("t1", lambda other: other["errors"].append("boom"))  # type: ignore[union-attr]
        record["status"] = "FAILED"

    updated = store.update("t1", fail)
    assert updated is not None and updated["errors"] == ["boom"]
    assert store.load("t1") == {"task": "app.tasks.f", "status": "FAILED", "errors": ["boom"]}
    assert 0 < r.ttl(config.keys.task_result("t1")) <= store.ttl


def test_an_update_of_a_record_of_another_type_finds_none(config: wurk.Config,
                                                          r: redis.Redis) -> None:
    r.hset(config.keys.task_result("t2"), "status", "x")
    assert ResultStore(config).update("t2", lambda record: None) is None
    assert r.type(config.keys.task_result("t2")) == "hash"
