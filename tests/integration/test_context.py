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


locale: contextvars.ContextVar[str] = contextvars.ContextVar("locale_name")


def test_persist_adds_its_two_links_once_to_the_default_configuration(
        fast: wurk.Config) -> None:
    """context-propagation.md: ``persist`` "adds a client and a server middleware to the
    configuration (once; the default one unless ``config=`` is given)"."""
    from wurk.context import RestoreContext, SaveContext

    assert wurk.default_config() is fast  # wurk.configure made it the default
    wurk.context.persist(locale)  # no config=: the default one
    wurk.context.persist(tenant, locale)  # again: no second pair of links
    assert [type(link) for link in fast.client_middleware
            if isinstance(link, SaveContext)] == [SaveContext]
    assert [type(link) for link in fast.server_middleware
            if isinstance(link, RestoreContext)] == [RestoreContext]
    assert wurk.context.persisted() == ["locale_name", "request_id", "tenant"]
    other = wurk.Config(redis_url=fast.redis_url)
    wurk.context.persist(locale, config=other)
    assert wurk.context.persisted(other) == ["locale_name"]


def test_names_the_worker_does_not_know_are_ignored(fast: wurk.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", json.dumps({
        "class": "Context::Record", "args": ["known"], "queue": "default", "jid": "c" * 24,
        "wurk_ctx": {"tenant": "acme", "Current.unknown": 5}, "created_at": time.time(),
    }))
    r.sadd("queues", "default")
    with wurk.embed(fast):
        wait_until(lambda: len(seen) == 1)
    assert seen == [("known", "acme", None)]
    assert r.zcard("retry") == 0


def test_ruby_context_keys_pass_through_a_push_and_the_dead_set_untouched(
        fast: wurk.Config, r: redis.Redis) -> None:
    cattr = {"Current.user_id": 7}
    token = tenant.set("acme")
    try:
        wurk.push({"class": "Context::Fail", "args": [], "retry": 0, "cattr": cattr,
                   "locale": "de"})
    finally:
        tenant.reset(token)
    pushed = only(r, "queue:default")
    assert (pushed["cattr"], pushed["locale"], pushed["wurk_ctx"]) == (
        cattr, "de", {"tenant": "acme"})
    with wurk.embed(fast):
        wait_until(lambda: r.zcard("dead") == 1)
    dead = only(r, "dead")
    assert (dead["cattr"], dead["locale"], dead["wurk_ctx"]) == (cattr, "de", {"tenant": "acme"})


def test_a_bad_wurk_ctx_goes_through_its_retries_to_the_dead_set(
        fast: wurk.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", json.dumps({
        "class": "Context::Record", "args": ["bad"], "queue": "default", "jid": "d" * 24,
        "retry": 1, "retry_count": 0, "wurk_ctx": "tenant=acme", "created_at": time.time(),
    }))  # its first retry: the last one retry=1 allows
    r.sadd("queues", "default")
    with wurk.embed(fast):
        wait_until(lambda: r.zcard("dead") == 1)
    dead = only(r, "dead")
    assert dead["error_class"] == "wurk.InvalidPayload" and "wurk_ctx" in dead["error_message"]
    assert r.zcard("retry") == 0 and seen == []


@wurk.job(name="Context::Setter")
def setter() -> None:
    tenant.set("leaked")  # a job choosing its tenant itself, no reset


def test_a_value_a_job_sets_itself_does_not_leak_into_the_next_job(fast: wurk.Config) -> None:
    """A job that set a persisted variable itself left it set on its processor thread: the
    next job there saw that tenant and carried it into every job it pushed."""
    setter.perform_async()
    chain.perform_async()  # pushes record("child") with whatever context it runs in
    with wurk.embed(fast):
        wait_until(lambda: len(seen) == 1)
    assert seen == [("child", None, None)]
