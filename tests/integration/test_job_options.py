"""No option does nothing: every job option docs/jobs-and-pushing.md lists, and every
lifecycle event docs/worker.md lists, is shown here to have its effect — or to be refused.

The lists are read from the docs, so an option documented later without a check here fails
``test_every_documented_option_is_checked``."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import InProcessWorker
from tests.helpers.runner import Drain
from tests.helpers.wait import wait_until
from wurk import crypto
from wurk import log as wurk_log
from wurk.scheduled import Scheduler

ROOT = Path(__file__).resolve().parents[2]
RAN: list[Any] = []


def documented(page: str, heading: str) -> set[str]:
    """The first-column names (in backticks) of the table under ``heading``."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    section = text[text.index(heading):]
    table = section[:section.index("\n\n", section.index("|"))]
    names: set[str] = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            names |= set(re.findall(r"`([a-z_]+)`", row.split("|")[1]))
    return names


@pytest.fixture
def config(redis_server: Any) -> Iterator[wurk.Config]:
    RAN.clear()
    yield wurk.configure(redis_url=redis_server.url)


@pytest.fixture
def r(redis_server: Any) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


@wurk.job(name="opts.work")
def work(tag: str) -> None:
    RAN.append(tag)
    wurk_log.logger.debug("a debug line of %s", tag)


@wurk.job(name="opts.pair")
def pair(public: str, secret: str) -> None:
    RAN.append(secret)


@wurk.job(name="opts.fail")
def fail(tag: str) -> None:
    RAN.append(tag)
    raise RuntimeError(f"failing {tag}")


def only(r: redis.Redis, key: str) -> dict[str, Any]:
    entries = r.zrange(key, 0, -1) if r.type(key) == "zset" else r.lrange(key, 0, -1)
    assert len(entries) == 1, (key, entries)
    return dict(json.loads(entries[0]))


# -- one check per option ------------------------------------------------------------------------
def check_queue(config: wurk.Config, r: redis.Redis) -> None:
    work.set(queue="low").perform_async("q")
    assert r.llen("queue:low") == 1 and r.llen("queue:default") == 0


def check_retry(config: wurk.Config, r: redis.Redis) -> None:
    fail.set(retry=0).perform_async("r")
    Drain(config)()
    assert r.zcard("retry") == 0 and only(r, "dead")["retry"] == 0


def check_retry_for(config: wurk.Config, r: redis.Redis) -> None:
    fail.set(retry_for=60).perform_async("rf")
    Drain(config)()
    entry = only(r, "retry")
    assert entry["retry_for"] == 60
    entry["failed_at"] = int((time.time() - 120) * 1000)  # its window has passed
    r.delete("retry")
    r.lpush("queue:default", json.dumps(entry))
    Drain(config)()
    assert r.zcard("retry") == 0 and r.zcard("dead") == 1


def check_retry_queue(config: wurk.Config, r: redis.Redis) -> None:
    fail.set(retry_queue="later").perform_async("rq")
    Drain(config)()
    assert only(r, "retry")["queue"] == "later"


def check_dead(config: wurk.Config, r: redis.Redis) -> None:
    fail.set(retry=0, dead=False).perform_async("d")
    Drain(config)()
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0 and RAN == ["d"]


def check_backtrace(config: wurk.Config, r: redis.Redis) -> None:
    fail.set(backtrace=True).perform_async("b")
    fail.perform_async("nb")
    Drain(config)()
    entries = {json.loads(e)["args"][0]: json.loads(e) for e in r.zrange("retry", 0, -1)}
    assert "error_backtrace" in entries["b"] and "error_backtrace" not in entries["nb"]


def check_tags(config: wurk.Config, r: redis.Redis) -> None:
    work.set(tags=["vip"]).perform_async("t")
    assert only(r, "queue:default")["tags"] == ["vip"]


def check_log_level(config: wurk.Config, r: redis.Redis) -> None:
    out = io.StringIO()
    handler = wurk_log.setup(fmt="plain", level="INFO", stream=out)
    try:
        work.set(log_level="debug").perform_async("loud")
        work.set(log_level="warn").perform_async("quiet")
        work.perform_async("usual")
        Drain(config)()
        wurk_log.flush()
    finally:
        wurk_log.logger.removeHandler(handler)
        wurk_log.logger.setLevel(logging.NOTSET)
    text = out.getvalue()
    assert "a debug line of loud" in text  # debug, though the worker logs at info
    assert "a debug line of usual" not in text  # the others stay at info
    done = [line for line in text.splitlines() if line.endswith("INFO: done")]
    assert len(done) == 2 and not any("quiet" in line for line in done)  # warn: no done line
    assert sorted(RAN) == ["loud", "quiet", "usual"]
    with pytest.raises(wurk.ConfigError, match="log_level='loudest' is invalid"):
        work.set(log_level="loudest")


def check_encrypt(config: wurk.Config, r: redis.Redis) -> None:
    crypto.enable(active_version=1, key_for=lambda v: b"k" * 32, config=config)
    with pytest.raises(wurk.InvalidArguments, match="at least two arguments, not 1"):
        work.set(encrypt=True).perform_async("secret-value")  # it would be the secret
    pair.set(encrypt=True).perform_async("public", "secret-value")
    assert crypto.is_envelope(only(r, "queue:default")["args"][-1])
    Drain(config)()
    assert RAN == ["secret-value"]
    with pytest.raises(wurk.ConfigError, match="encrypt='yes' is invalid"):
        work.set(encrypt="yes")


def check_expires_in(config: wurk.Config, r: redis.Redis) -> None:
    work.set(expires_in=60).perform_async("late")
    entry = only(r, "queue:default")
    entry["expires_at"] = int((time.time() - 1) * 1000)
    r.delete("queue:default")
    r.lpush("queue:default", json.dumps(entry))
    Drain(config)()
    assert RAN == []


def check_unique_for(config: wurk.Config, r: redis.Redis) -> None:
    assert work.set(unique_for=60).perform_async("u") is not None
    assert work.set(unique_for=60).perform_async("u") is None


def check_unique_until(config: wurk.Config, r: redis.Redis) -> None:
    fail.set(unique_for=60, unique_until="start").perform_async("us")
    Drain(config)()  # failed, but its lock went at its start
    assert fail.set(unique_for=60, unique_until="start").perform_async("us") is not None


def check_rate_limit(config: wurk.Config, r: redis.Redis) -> None:
    limited = wurk.job(name="opts.limited", rate_limit=wurk.limiter.window(
        "opts-limit", 1, 60, wait_timeout=0))(lambda tag: RAN.append(tag))
    limited.perform_async("first")
    limited.perform_async("second")
    Drain(config)()
    assert RAN == ["first"] and r.zcard("schedule") == 1  # the second was rescheduled
    with pytest.raises(wurk.ConfigError, match="rate_limit is an option of the job's"):
        limited.set(rate_limit=None)
    with pytest.raises(wurk.RegistrationError, match="must be a limiter"):
        wurk.job(name="opts.bad_limit", rate_limit="api")(lambda: None)


def check_hooks(config: wurk.Config, r: redis.Redis) -> None:
    exhausted: list[str] = []
    hooked = wurk.job(name="opts.hooked", retry=1, retry_in=lambda count, exc: 5000,
                      retries_exhausted=lambda job, exc: exhausted.append(job["jid"]),
                      unique_context=lambda job: ["same"])(fail.__wrapped__)
    jid = hooked.set(unique_for=60).perform_async("h1")
    assert hooked.set(unique_for=60).perform_async("other args") is None  # one context
    Drain(config)()
    score = r.zrange("retry", 0, -1, withscores=True)[0][1]
    assert score > time.time() + 4000  # retry_in's 5000 s
    r.zadd("retry", {r.zrange("retry", 0, -1)[0]: 0})
    Scheduler(config).enqueue_due()
    Drain(config)()
    assert exhausted == [jid]


def check_partition(config: wurk.Config, r: redis.Redis) -> None:
    parted = wurk.configure(redis_url=config.redis_url, partitions={"low": 1})
    work.set(queue="low", partition="acct-7").perform_async("p")
    assert only(r, parted.keys.partition("low", "acct-7"))["partition"] == "acct-7"
    assert r.zrange(parted.keys.partition_ring("low"), 0, -1) == ["acct-7"]
    assert not r.exists("queue:low")
    with pytest.raises(wurk.ConfigError, match="partition='a:b' is invalid"):
        work.set(partition="a:b").perform_async("bad")


def check_partition_by(config: wurk.Config, r: redis.Redis) -> None:
    parted = wurk.configure(redis_url=config.redis_url, partitions={"low": 1})
    by_account = wurk.job(name="opts.by_account", queue="low",
                          partition_by=lambda account, tag: f"acct-{account}")(
        lambda account, tag: RAN.append(tag))
    by_account.perform_async(7, "p")
    assert only(r, parted.keys.partition("low", "acct-7"))["args"] == [7, "p"]
    by_account.set(partition="mine").perform_async(7, "q")  # the push's own wins
    assert only(r, parted.keys.partition("low", "mine"))["partition"] == "mine"
    with pytest.raises(wurk.InvalidPayload, match=r"job 'opts\.by_account'.*partition="):
        by_account.perform_async("a:b", "bad")
    with pytest.raises(wurk.ConfigError, match="partition_by is an option of the job's"):
        by_account.set(partition_by=lambda *a: "x")
    with pytest.raises(wurk.RegistrationError, match="must be a function"):
        wurk.job(name="opts.bad_by", partition_by="account")(lambda: None)


def check_profile(config: wurk.Config, r: redis.Redis) -> None:
    jid = work.set(profile="t").perform_async("p1")
    Drain(config)()
    assert RAN == ["p1"] and r.hget(f"t-{jid}", "jid") == jid  # its profile, kept a day
    with pytest.raises(wurk.ConfigError, match="profile='' is invalid"):
        wurk.job(name="opts.profiled", profile="")(lambda: None)


def check_profiler_options(config: wurk.Config, r: redis.Redis) -> None:
    jid = work.set(profile="t", profiler_options={"interval": 200}).perform_async("p2")
    Drain(config)()
    assert RAN == ["p2"] and r.exists(f"t-{jid}")
    with pytest.raises(wurk.ConfigError, match="'allocation_interval' is not one"):
        work.set(profiler_options={"allocation_interval": 1})


@wurk.job(name="opts.spin", retry=0)
def spin(seconds: float) -> None:
    end = time.monotonic() + seconds  # a loop in Python: only its time limit stops it early
    while time.monotonic() < end:
        pass
    RAN.append("spun")


def check_timeout(config: wurk.Config, r: redis.Redis) -> None:
    # A worker's processor thread is what a time limit stops (a drain in this thread is not
    # watched); tests/integration/test_time_limits_and_cancel.py has the rest.
    worker = InProcessWorker(config.redis_url, concurrency=1, heartbeat_interval=0.2).start()
    try:
        spin.set(timeout=0.5).perform_async(20)
        wait_until(lambda: r.zcard("dead") == 1, timeout=30, what="the job past its limit")
    finally:
        worker.stop()
    assert json.loads(r.zrange("dead", 0, -1)[0])["error_class"] == "wurk.JobTimeout"
    assert RAN == []
    with pytest.raises(wurk.ConfigError, match="time limit in seconds"):
        spin.set(timeout=0)


@wurk.job(name="opts.add")
def add(a: int, b: int) -> int:
    return a + b


def check_result_ttl(config: wurk.Config, r: redis.Redis) -> None:
    handle = add.set(result_ttl=60).perform_async(2, 3)
    Drain(config)()
    assert handle.result(timeout=5) == 5
    assert 0 < r.ttl(f"wurk:result:{handle}") <= 60  # kept as long as asked, no longer
    unkept = add.perform_async(1, 1)
    Drain(config)()
    assert not r.exists(f"wurk:result:{unkept}")  # without the option nothing is stored
    with pytest.raises(wurk.ConfigError):
        add.set(result_ttl=-1)


OPTIONS: dict[str, Callable[[wurk.Config, redis.Redis], None]] = {
    "queue": check_queue, "retry": check_retry, "retry_for": check_retry_for,
    "retry_queue": check_retry_queue, "dead": check_dead, "backtrace": check_backtrace,
    "tags": check_tags, "log_level": check_log_level, "encrypt": check_encrypt,
    "expires_in": check_expires_in, "unique_for": check_unique_for,
    "unique_until": check_unique_until, "rate_limit": check_rate_limit,
    "retry_in": check_hooks, "retries_exhausted": check_hooks, "unique_context": check_hooks,
    "profile": check_profile, "profiler_options": check_profiler_options,
    "partition": check_partition, "partition_by": check_partition_by,
    "timeout": check_timeout, "result_ttl": check_result_ttl,
}


def test_every_documented_option_is_checked() -> None:
    assert documented("jobs-and-pushing.md", "### Options") == set(OPTIONS)


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_the_option_has_its_effect_or_is_refused(option: str, config: wurk.Config,
                                                 r: redis.Redis) -> None:
    OPTIONS[option](config, r)


# -- lifecycle events ----------------------------------------------------------------------------
EVENTS_IN_PROCESS = ("startup", "quiet", "shutdown", "exit", "heartbeat", "beat", "leader",
                     "follower")
# Fired in a swarm child only: tests/system/test_swarm.py asserts every child ran its hook.
EVENTS_ELSEWHERE = ("fork",)


def test_every_documented_event_is_checked() -> None:
    events = documented("worker.md", "## Lifecycle events")
    assert events == {*EVENTS_IN_PROCESS, *EVENTS_ELSEWHERE}
    assert events == set(wurk.config.LIFECYCLE_EVENTS)


def test_every_lifecycle_event_fires(redis_server: Any) -> None:
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.05,
                            leader_renew_interval=0.5, fetch_timeout=0.1, timeout=1,
                            shutdown_grace=0.5, tag="events")
    fired: list[str] = []
    for event in EVENTS_IN_PROCESS:
        config.on(event, lambda event=event: fired.append(event))
    worker = wurk.embed(config)
    deadline = time.monotonic() + 20
    while not {"heartbeat", "leader"} <= set(fired) or fired.count("beat") < 3:
        assert time.monotonic() < deadline, fired
        time.sleep(0.02)
    worker.stop()
    assert fired[0] == "startup" and fired.count("heartbeat") == 1
    assert fired.count("beat") >= 3  # every beat, not once
    tail = [event for event in fired if event in ("quiet", "shutdown", "exit", "follower")]
    assert [e for e in tail if e != "follower"] == ["shutdown", "quiet", "exit"]
    assert "follower" in tail  # it stepped down as it stopped
    with pytest.raises(wurk.ConfigError, match="unknown lifecycle event 'beats'"):
        config.on("beats", lambda: None)


def test_the_environment_is_in_the_record_the_boot_line_and_the_dashboard_title(
        redis_server: Any, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.web.conftest import browse
    from wurk.web import create_app

    monkeypatch.setenv("APP_ENV", "staging")
    config = wurk.configure(redis_url=redis_server.url, tag="env")
    assert config.environment == "staging"  # WURK_ENV, else APP_ENV
    caplog.set_level(logging.INFO, logger="wurk")
    worker = wurk.embed(config)
    try:
        info = json.loads(r.hget(worker.identity or "", "info") or "{}")
    finally:
        worker.stop()
    assert info["env"] == "staging"
    assert "environment staging" in caplog.text
    with browse(create_app(config)) as web:
        assert "<title>[STAGING] " in web.get("/").text
    production = wurk.configure(redis_url=redis_server.url, environment="production")
    with browse(create_app(production)) as web:
        assert "<title>[" not in web.get("/").text
