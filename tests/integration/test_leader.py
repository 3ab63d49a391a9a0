"""Leader election against a real server: one leader, a token that only grows, takeover
within the key's life, lapse when Redis is unreachable, stepping down only our own key."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from tests.helpers.wait import step, wait_until
from wurk.config import Config
from wurk.connections.pool import RedisPool
from wurk.periodic.leader import EXPIRY_MARGIN, Leadership
from wurk.runtime.clock import SYSTEM, Clock, ManualClock

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

    def build(identity: str, *, pool: RedisPool | None = None, clock: Clock = SYSTEM,
              **settings: Any) -> tuple[Leadership, Events]:
        config = Config(**{**FAST, **settings})
        events = Events()
        leadership = Leadership(config, identity, on_change=events, pool=pool, clock=clock)
        made.append((leadership, config))
        return leadership, events

    yield build
    for leadership, config in made:
        leadership.stop(2)
        config.close()


def test_one_leader_and_a_follower(elect: Callable[..., tuple[Leadership, Events]],
                                   r: redis.Redis) -> None:
    # Turns are run by hand, so no key lapses between them however slow the machine.
    first, first_events = elect("host:1:a", leader_renew_interval=5)
    second, second_events = elect("host:2:b", leader_renew_interval=5)
    for _ in range(3):  # the leader campaigns then renews; the follower is refused each time
        assert first._duty.run() and second._duty.run()
    assert first.is_leader() and not second.is_leader()
    assert (first.token, second.token) == (1, None)
    assert r.get("dear-leader") == "host:1:a" and r.get("leader-token") == "1"
    assert 0 < r.pttl("dear-leader") <= first.ttl * 1000 == 10_000
    assert first_events.seen == [True] and second_events.seen == []


def test_stepping_down_hands_over_with_a_greater_token(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    first, first_events = elect("host:1:a")
    second, second_events = elect("host:2:b", leader_check_interval=0.2)
    first.start()
    wait_until(first.is_leader, 10, "the first to lead")
    second.start()
    first.stop(2)
    assert first_events.seen == [True, False] and not first.is_leader()
    wait_until(second.is_leader, 10, "the second to lead")
    assert second.token == 2 and r.get("dear-leader") == "host:2:b"
    assert second_events.seen == [True]


def test_a_killed_leader_is_replaced_when_its_key_runs_out_not_a_check_interval_later(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    # The "killed" leader is a key nobody renews, as a SIGKILLed process leaves it.
    r.set("dear-leader", "gone:1:x", px=1000)
    r.set("leader-token", "41")
    follower, _ = elect("host:2:b", leader_check_interval=30.0)
    assert follower._duty.run() and not follower.is_leader()
    # It looks again when the key runs out (1 s and a margin), not a check interval later.
    assert 0 < follower._duty.next_wait() <= 1.0 + EXPIRY_MARGIN
    r.delete("dear-leader")  # what Redis does when the key's life ends
    assert follower._duty.run() and follower.is_leader()
    assert follower.token == 42


def test_a_leader_cut_off_from_redis_lapses_when_its_key_would(
        elect: Callable[..., tuple[Leadership, Events]], redis_server: Server) -> None:
    """Leadership is counted from before the last renewal was sent: on its clock, the cut-off
    leader leads until the key's life has passed and not an instant longer."""
    clock = ManualClock()
    with FaultProxy(redis_server.port) as proxy:
        pool = RedisPool(proxy.url, size=2, socket_timeout=0.3)
        leader, events = elect("host:1:a", pool=pool, clock=clock)
        sent = clock.monotonic()
        leader.start()  # campaigns at once; renews only when the clock moves
        wait_until(leader.is_leader, 10, "it to lead")
        events.changed.clear()
        proxy.blackhole()
        proxy.cut()
        step(clock, leader.config.leader_renew_interval)  # a renewal that cannot get through
        wait_until(lambda: leader._duty.failing, 10, "the failed renewal")
        clock.advance(sent + leader.ttl - 0.001 - clock.monotonic())
        assert leader.is_leader()
        clock.advance(0.001)
        assert not leader.is_leader()
        assert events.changed.wait(10) and events.seen == [True, False]
        wait_until(lambda: clock.waiting() >= 1, 10, "its campaign to fail")
        proxy.cut()  # its blackholed campaigns are dropped, not delivered on restore
        proxy.restore()
        wait_until(leader._duty.run, 10, "a campaign that gets through")
        assert leader.is_leader() and leader.token == 2, "a new term after a lapse"
        leader.stop(10)
        pool.close()


def test_stepping_down_never_deletes_another_leaders_key(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    old, _ = elect("host:1:a")
    old.start()
    wait_until(old.is_leader, 10, "it to lead")
    old._duty.stop(2)  # paused: it renews no more
    r.set("dear-leader", "host:2:b", ex=30)  # its key expired and another took it
    old.stop(2)
    assert r.get("dear-leader") == "host:2:b"


class Held(RedisPool):
    """A pool whose next call, once armed, waits until released: a campaign held up on its
    way to a slow Redis."""

    def __init__(self, url: str) -> None:
        super().__init__(url, size=2)
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def run(self, fn: Callable[[redis.Redis], Any], *, idempotent: bool = False) -> Any:
        if self.armed:
            self.armed = False
            self.entered.set()
            self.release.wait(30)
        return super().run(fn, idempotent=idempotent)


def test_a_campaign_that_outlives_stop_leaves_no_leader_behind(
        elect: Callable[..., tuple[Leadership, Events]], redis_server: Server,
        r: redis.Redis) -> None:
    """``stop`` waits up to its timeout for a turn in progress, then steps down. A campaign
    slower than that still reaches Redis afterwards: it must not leave ``dear-leader``
    naming a process that stopped polling (no process would fire a tick for the key's
    life), nor make it lead, nor announce a term, after its stop."""
    pool = Held(redis_server.url)
    leadership, events = elect("host:1:a", pool=pool)
    pool.armed = True
    leadership.start()  # campaigns at once: held on its way
    assert pool.entered.wait(10), "the campaign never started"
    leadership.stop(0.1)  # gives up waiting for the held turn; nothing to step down from yet
    pool.release.set()
    wait_until(lambda: not leadership.is_alive(), 10, "the held turn to end")
    assert r.get("dear-leader") is None, "the key names a process that stopped"
    assert not leadership.is_leader() and leadership.token is None
    assert events.seen == []
    pool.close()


def test_leader_false_never_campaigns(elect: Callable[..., tuple[Leadership, Events]],
                                      r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WURK_LEADER", "false")
    leadership, events = elect("host:1:a")
    leadership.start()
    assert not leadership.is_alive()  # no loop: nothing will ever campaign
    assert not leadership.is_leader() and r.get("dear-leader") is None and events.seen == []


def test_a_hostile_token_is_refused_with_a_message_naming_it(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis) -> None:
    r.set("leader-token", "not a number")
    reports: list[BaseException] = []
    leadership, _ = elect("host:1:a")
    leadership.config.error_handlers.append(lambda exc, ctx, cfg: reports.append(exc))
    leadership.start()
    wait_until(lambda: bool(reports), 10, "the error report")
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
    worker = wurk.InProcessWorker(config).start()
    try:
        wait_until(config.is_leader, 10, "the worker to lead")
        assert config.leader_token() == 1 and r.get("dear-leader") == worker.identity
        assert view.is_leader() and view.leader_token() == 1
        wait_until(lambda: bool(seen), 10, "the leader event")
        assert seen == [("leader", True, 1)]
        worker.quiet()
        assert not config.is_leader() and r.get("dear-leader") is None
        assert seen[-1] == ("follower", False, None)
    finally:
        worker.stop()
        config.close()


@pytest.mark.parametrize("token", ["0123", "99999999999999999999"])
def test_a_token_redis_cannot_count_on_is_refused_naming_it_before_any_write(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis, token: str) -> None:
    """Digits INCR refuses (a leading zero, past 2^63) passed the check: the key was taken,
    then INCR failed naming no key, at every turn, the key left naming a process that does
    not lead."""
    r.set("leader-token", token)
    leadership, _ = elect("host:1:a")
    with pytest.raises(redis.ResponseError, match=r"leader-token holds .*not a whole number"):
        leadership._turn()
    assert not leadership.is_leader() and r.get("dear-leader") is None
    assert r.get("leader-token") == token


@pytest.mark.parametrize("key", ["dear-leader", "leader-token"])
def test_a_leader_key_of_another_type_is_replaced_with_a_warning(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis,
        caplog: pytest.LogCaptureFixture, key: str) -> None:
    """Either key holding another type (no TTL) failed every campaign, and every step down,
    with a WRONGTYPE naming no key: no process could lead again."""
    r.hset(key, "holder", "host:9:z")
    leadership, events = elect("host:1:a")
    leadership._turn()
    assert leadership.is_leader() and events.seen == [True]
    assert r.get("dear-leader") == "host:1:a" and r.get("leader-token") == str(leadership.token)
    assert any(f"{key} held a hash" in rec.getMessage() for rec in caplog.records)
    r.delete("dear-leader")
    r.hset("dear-leader", "holder", "host:9:z")
    leadership.stop(2)  # stepping down meets it too, and leaves it alone: it is not ours
    assert r.type("dear-leader") == "hash"


def test_a_holder_key_set_for_days_is_warned_about_once(
        elect: Callable[..., tuple[Leadership, Events]], r: redis.Redis,
        caplog: pytest.LogCaptureFixture) -> None:
    """A dear-leader written by hand with a TTL of days stopped every election for that
    long without a word (one with no expiry at all was warned about)."""
    r.set("dear-leader", "host:9:z", ex=5 * 86400)
    leadership, _ = elect("host:1:a")
    leadership._turn()
    leadership._turn()
    assert not leadership.is_leader()
    warned = [rec.getMessage() for rec in caplog.records if "for another" in rec.getMessage()]
    assert len(warned) == 1 and "host:9:z" in warned[0] and "delete the key" in warned[0]
    r.set("dear-leader", "host:8:y", ex=60)  # a Ruby leader's own term: no warning
    leadership._turn()
    assert not any("host:8:y" in rec.getMessage() for rec in caplog.records)


def test_a_holder_is_named_printable(elect: Callable[..., tuple[Leadership, Events]],
                                     r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    r.set("dear-leader", "host:9:z\nFORGED line")
    leadership, _ = elect("host:1:a")
    leadership._turn()
    assert not leadership.is_leader()
    assert "FORGED" in caplog.text and "\nFORGED" not in caplog.text
