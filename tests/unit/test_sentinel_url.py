"""The ``redis+sentinel://`` URL: what it says, what is refused, and how logs show it."""

from __future__ import annotations

from typing import ClassVar

import pytest

import wurk
from wurk.connections.locate import describe_url
from wurk.connections.sentinel import SentinelTarget, _answered, parse


def test_every_part_of_the_form() -> None:
    url = ("redis+sentinel://app:s%40cret@s1.example,s2.example:26380,[::1]:26381/jobs/3"
           "?sentinel_username=watch&sentinel_password=w%21")
    assert parse(url) == SentinelTarget(
        sentinels=(("s1.example", 26379), ("s2.example", 26380), ("::1", 26381)),
        service="jobs", db=3, username="app", password="s@cret",
        sentinel_username="watch", sentinel_password="w!")


def test_the_shortest_form_and_a_password_alone() -> None:
    assert parse("redis+sentinel://s1/jobs") == SentinelTarget((("s1", 26379),), "jobs")
    assert parse("redis+sentinel://:pw@s1:5/jobs/").password == "pw"
    assert parse("redis+sentinel://:pw@s1:5/jobs/").username is None


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://s1", "names the service"),
    ("redis+sentinel://s1/jobs/0/extra", "names the service"),
    ("redis+sentinel://s1/jobs/zero", "must be a number"),
    ("redis+sentinel://s1:port/jobs", "is not HOST or HOST:PORT"),
    ("redis+sentinel://s1:70000/jobs", "is not a TCP port"),
    ("redis+sentinel://s1,/jobs", "is not HOST or HOST:PORT"),
    ("redis+sentinel://s1/jobs?ssl=true", "unknown option 'ssl'"),
    ("redis+sentinel://s1/jobs/\u00b2", "must be a number"),  # a digit int() cannot read
    ("redis+sentinel://s1/jobs?sentinel_password=a&sentinel_password=b",
     "'sentinel_password' is given twice"),
])
def test_a_wrong_url_is_refused_naming_what_and_the_form(url: str, says: str) -> None:
    with pytest.raises(wurk.ConfigError, match=says) as caught:
        parse(url)
    assert "redis+sentinel://[[USER]:PASSWORD@]HOST" in str(caught.value)


def test_the_configuration_refuses_it_at_build_naming_the_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(wurk.ConfigError, match=r"^redis_url: Sentinel URL: unknown option"):
        wurk.Config(redis_url="redis+sentinel://s1/jobs?tls=1")


def test_logs_show_neither_password() -> None:
    shown = describe_url("redis+sentinel://app:secret@s1,s2:26380/jobs/2"
                         "?sentinel_password=hidden")
    assert shown == ("redis+sentinel://app:***@s1:26379,s2:26380/jobs/2"
                     "?sentinel_password=***")
    assert "secret" not in shown and "hidden" not in shown


@pytest.mark.parametrize(("settings", "says"), [
    ({"push_replicas": -1}, "push_replicas must be a whole number"),
    ({"push_replicas": True}, "push_replicas must be a whole number"),
    ({"push_replica_timeout": 0}, "push_replica_timeout must be a number of seconds > 0"),
    ({"push_replicas": 1, "push_replica_timeout": 3.0, "socket_timeout": 3.0},
     "must be shorter than socket_timeout"),
])
def test_the_durability_settings_are_checked(settings: dict[str, object], says: str) -> None:
    with pytest.raises(wurk.ConfigError, match=says):
        wurk.Config(**settings)  # type: ignore[arg-type]


def test_a_sentinel_that_answered_moves_to_the_front_by_itself_not_by_a_stale_place() -> None:
    """Two threads looking up the primary at once: one moved sentinel c to the front while
    the other, which had found c at place 2, swapped by that place, putting c in twice and
    dropping a. The move goes by the sentinel itself."""
    class Manager:
        sentinels: ClassVar[list[str]] = ["c", "b", "a"]  # another thread moved c first

        @staticmethod
        def check_master_state(state: object, service: str) -> bool:
            return True

    masters = {"svc": {"ip": "10.0.0.1", "port": 6379, "flags": "master"}}
    assert _answered(Manager, "c", masters, "svc", []) == ("10.0.0.1", 6379)
    assert Manager.sentinels == ["c", "b", "a"]
    assert _answered(Manager, "a", masters, "svc", []) == ("10.0.0.1", 6379)
    assert sorted(Manager.sentinels) == ["a", "b", "c"] and Manager.sentinels[0] == "a"
