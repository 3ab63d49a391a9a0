"""Leader election against a real server: one leader, a token that only grows, takeover
within the key's life, lapse when Redis is unreachable, stepping down only our own key."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from wurk.config import Config
from wurk.connections.pool import RedisPool
from wurk.periodic.leader import Leadership

FAST = {"leader_renew_interval": 0.5, "leader_check_interval": 30.0}


class Events:
    def __init__(self) -> None:
        self.seen: list[bool] = []
        self.changed = threading.Event()

    def __call__(self, leading: bool) -> None:
        self.seen.append(leading)
        self.changed.set()


@pytest.fixture
def elect() -> Iterator[Callable[..., tuple[Leadership, Events]]]:
    made: list[tuple[Leadership, Config]] = []

    def build(identity: str, *, pool: RedisPool | None = None,
              **settings: Any) -> tuple[Leadership, Events]:
        config = Config(**{**FAST, **settings})
        events = Events()
        leadership = Leadership(config, identity, on_change=events, pool=pool)
        made.append((leadership, config))
        return leadership, events

    yield build
    for leadership, config in made:
        leadership.stop(2)
        config.close()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - started


def test_one_leader_and_a_follower(elect: Callable[..., tuple[Leadership, Events]],
                                   r: redis.Redis) -> None:
    first, first_events = elect("host:1:a")
    second, second_events = elect("host:2:b")
    first.start()
    wait_until(first.is_leader, 5, "the first to lead")
    second.start()
    time.sleep(1.2)  # a few renewals
    assert first.is_leader() and not second.is_leader()
    assert (first.token, second.token) == (1, None)
    assert r.get("dear-leader") == "host:1:a" and r.get("leader-token") == "1"
    assert 0 < r.ttl("dear-leader") <= first.ttl == 1
    assert first_events.seen == [True] and second_events.seen == []


def test_stepping_down_hands_over_with_a_greater_token(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    first, first_events = elect("host:1:a")
    second, second_events = elect("host:2:b", leader_check_interval=0.2)
    first.start()
    wait_until(first.is_leader, 5, "the first to lead")
    second.start()
    first.stop(2)
    assert first_events.seen == [True, False] and not first.is_leader()
    wait_until(second.is_leader, 5, "the second to lead")
    assert second.token == 2 and r.get("dear-leader") == "host:2:b"
    assert second_events.seen == [True]


def test_a_killed_leader_is_replaced_when_its_key_runs_out_not_a_check_interval_later(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    # The "killed" leader is a key nobody renews, as a SIGKILLed process leaves it.
    r.set("dear-leader", "gone:1:x", ex=1)
    r.set("leader-token", "41")
    follower, _ = elect("host:2:b", leader_check_interval=30.0)
    follower.start()
    took = wait_until(follower.is_leader, 5, "the follower to take over")
    assert took < 3, f"took {took:.1f} s; the check interval is 30 s"
    assert follower.token == 42


def test_a_leader_cut_off_from_redis_lapses_within_the_key_life(
        elect: Callable[..., tuple[Leadership, Events]], redis_server: Server) -> None:
    with FaultProxy(redis_server.port) as proxy:
        pool = RedisPool(proxy.url, size=2, socket_timeout=0.3)
        leader, events = elect("host:1:a", pool=pool)
        leader.start()
        wait_until(leader.is_leader, 5, "it to lead")
        events.changed.clear()
        proxy.blackhole()
        proxy.cut()
        lapsed = wait_until(lambda: not leader.is_leader(), 5, "the lapse")
        assert lapsed <= leader.ttl + 0.2
        assert events.changed.wait(3) and events.seen == [True, False]
        proxy.restore()
        wait_until(leader.is_leader, 10, "it to lead again once Redis is back")
        assert leader.token == 2, "a new term after a lapse gets a new token"
        leader.stop(2)
        pool.close()


def test_stepping_down_never_deletes_another_leaders_key(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    old, _ = elect("host:1:a")
    old.start()
    wait_until(old.is_leader, 5, "it to lead")
    old._duty.stop(2)  # paused: it renews no more
    r.set("dear-leader", "host:2:b", ex=30)  # its key expired and another took it
    old.stop(2)
    assert r.get("dear-leader") == "host:2:b"


def test_leader_false_never_campaigns(elect: Callable[..., tuple[Leadership, Events]],
                                      r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WURK_LEADER", "false")
    leadership, events = elect("host:1:a")
    leadership.start()
    time.sleep(0.5)
    assert not leadership.is_leader() and r.get("dear-leader") is None and events.seen == []


def test_a_hostile_token_is_refused_with_a_message_naming_it(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    r.set("leader-token", "not a number")
    reports: list[BaseException] = []
    leadership, _ = elect("host:1:a")
    leadership.config.error_handlers.append(lambda exc, ctx, cfg: reports.append(exc))
    leadership.start()
    wait_until(lambda: bool(reports), 5, "the error report")
    assert "leader-token holds" in str(reports[0]) and "not a whole number" in str(reports[0])
    assert not leadership.is_leader() and r.get("dear-leader") is None


def test_an_embedded_worker_answers_is_leader_fires_events_and_steps_down_on_quiet(
        r: redis.Redis) -> None:
    import wurk

    config = Config(**FAST, heartbeat_interval=0.5, scheduler_initial_wait=0,
                    fetch_timeout=0.5, tag="leader-test")
    seen: list[tuple[str, bool, int | None]] = []
    config.on("leader", lambda: seen.append(("leader", config.is_leader(),
                                             config.leader_token())))
    config.on("follower", lambda: seen.append(("follower", config.is_leader(),
                                               config.leader_token())))
    assert not config.is_leader() and config.leader_token() is None
    view = config.routed("api", "web", size=2)  # as a dashboard in the same process holds
    worker = wurk.Embedded(config).start()
    try:
        wait_until(config.is_leader, 5, "the worker to lead")
        assert config.leader_token() == 1 and r.get("dear-leader") == worker.identity
        assert view.is_leader() and view.leader_token() == 1
        wait_until(lambda: bool(seen), 2, "the leader event")
        assert seen == [("leader", True, 1)]
        worker.quiet()
        assert not config.is_leader() and r.get("dear-leader") is None
        assert seen[-1] == ("follower", False, None)
    finally:
        worker.stop()
        config.close()
