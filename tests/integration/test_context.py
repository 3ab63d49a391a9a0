"""wurk.context.persist: context variables saved into ``wurk_ctx`` at push time and set
around the job in a real worker; retries keep them; Ruby's context keys pass through."""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
import wurk.testing
from tests.helpers.server import Server
from wurk.errors import InvalidArguments

tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant")
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")
seen: list[tuple[str, Any, Any]] = []


@wurk.job(name="Context::Record")
def record(label: str) -> None:
    seen.append((label, tenant.get(None), request_id.get(None)))


@wurk.job(name="Context::Fail", retry=3)
def fail() -> None:
    seen.append(("fail", tenant.get(None), None))
    raise RuntimeError("again")


@wurk.job(name="Context::Chain")
def chain() -> None:
    record.perform_async("child")


@pytest.fixture
def fast(redis_server: Server) -> Iterator[wurk.Config]:
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                            scheduler_initial_wait=0, concurrency=1, tag="context")
    wurk.context.persist(tenant, request_id, config=config)
    seen.clear()
    yield config


def wait_until(predicate: Any, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def only(r: redis.Redis, key: str) -> dict[str, Any]:
    (raw,) = r.lrange(key, 0, -1) if r.type(key) == "list" else r.zrange(key, 0, -1)
    return json.loads(raw)  # type: ignore[no-any-return]


def test_saved_at_push_and_set_around_the_job(fast: wurk.Config, r: redis.Redis) -> None:
    token = tenant.set("acme")
    try:
        record.perform_async("first")
    finally:
        tenant.reset(token)
    assert only(r, "queue:default")["wurk_ctx"] == {"tenant": "acme"}
    record.perform_async("unset")  # no value here: nothing saved, nothing set
    with wurk.embed(fast):
        wait_until(lambda: len(seen) == 2)
    assert seen == [("first", "acme", None), ("unset", None, None)]


def test_a_job_pushing_a_job_passes_the_context_on(fast: wurk.Config) -> None:
    token = request_id.set("req-1")
    chain.perform_async()
    request_id.reset(token)
    with wurk.embed(fast):
        wait_until(lambda: len(seen) == 1)
    assert seen == [("child", None, "req-1")]


def test_retries_keep_the_saved_context(fast: wurk.Config, r: redis.Redis) -> None:
    token = tenant.set("acme")
    fail.perform_async()
    tenant.reset(token)
    with wurk.embed(fast):
        wait_until(lambda: r.zcard("retry") == 1)
    entry = only(r, "retry")
    assert entry["wurk_ctx"] == {"tenant": "acme"}
    assert seen == [("fail", "acme", None)]
    # The client scheduler re-pushes through client middleware from a thread whose context
    # holds another tenant: the saved one must survive.
    other = tenant.set("intruder")
    try:
        wurk.push({k: v for k, v in entry.items() if k != "enqueued_at"})
    finally:
        tenant.reset(other)
    assert only(r, "queue:default")["wurk_ctx"] == {"tenant": "acme"}


def test_ruby_context_keys_pass_through_retry_untouched(fast: wurk.Config,
                                                        r: redis.Redis) -> None:
    cattr = {"Current.user_id": 7, "Current.account": "acme"}
    r.lpush("queue:default", json.dumps({
        "class": "Context::Fail", "args": [], "queue": "default", "jid": "a" * 24,
        "retry": 3, "cattr": cattr, "locale": "de", "created_at": time.time(),
    }))
    r.sadd("queues", "default")
    with wurk.embed(fast):
        wait_until(lambda: r.zcard("retry") == 1)
    entry = only(r, "retry")
    assert entry["cattr"] == cattr
    assert entry["locale"] == "de"
    assert "wurk_ctx" not in entry


def test_the_value_is_reset_after_the_job(fast: wurk.Config) -> None:
    token = tenant.set("acme")
    with wurk.testing.inline():
        record.perform_async("inline")
    tenant.reset(token)
    assert seen == [("inline", "acme", None)]
    assert tenant.get(None) is None


def test_a_value_that_is_not_json_is_refused_naming_the_variable(fast: wurk.Config) -> None:
    token = tenant.set(object())  # type: ignore[arg-type]
    try:
        with pytest.raises(InvalidArguments, match="context variable 'tenant'"):
            record.perform_async("x")
    finally:
        tenant.reset(token)


def test_a_bad_wurk_ctx_fails_the_job_into_retries(fast: wurk.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", json.dumps({
        "class": "Context::Record", "args": ["bad"], "queue": "default", "jid": "b" * 24,
        "retry": 3, "wurk_ctx": ["not", "an", "object"], "created_at": time.time(),
    }))
    r.sadd("queues", "default")
    with wurk.embed(fast):
        wait_until(lambda: r.zcard("retry") == 1)
    entry = only(r, "retry")
    assert entry["error_class"] == "wurk.InvalidPayload"
    assert "wurk_ctx" in entry["error_message"]
    assert seen == []


def test_two_variables_of_one_name_are_refused(fast: wurk.Config) -> None:
    with pytest.raises(ValueError, match="another context variable named 'tenant'"):
        wurk.context.persist(contextvars.ContextVar("tenant"), config=fast)
    assert wurk.context.persisted(fast) == ["request_id", "tenant"]
