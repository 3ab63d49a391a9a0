"""Settings with no rule of their own are type-checked when a configuration is built."""

from __future__ import annotations

from typing import Any

import pytest

from wurk.config import Config
from wurk.errors import ConfigError


@pytest.mark.parametrize(("setting", "value", "says"), [
    ("log_level", "loud", "log_level must be one of DEBUG"),
    ("log_level", None, "log_level must be one of DEBUG"),
    ("tag", ["a"], "tag must be text"),
    ("key_prefix", 7, "key_prefix must be text"),
    ("leader", "yes", "leader must be true or false"),
    # Was taken as it was: "false" (quoted) or .nan read as true, 0 as false.
    ("web_read_only", "false", "web_read_only must be true or false"),
    ("web_read_only", float("nan"), "web_read_only must be true or false"),
    ("labels", "a,b", "labels must be a list of text"),
    ("logged_job_attributes", [1], "logged_job_attributes must be a list of text"),
    ("heartbeat_interval", 0, "heartbeat_interval must be a number of seconds > 0"),
    ("poll_interval_average", 0, "poll_interval_average must be a number of seconds > 0"),
    ("fetch_timeout", 0, "fetch_timeout must be a number of seconds > 0"),
    ("super_fetch_orphan_check", 0, "super_fetch_orphan_check must be a number of seconds > 0"),
    ("super_fetch_orphan_check", None, "super_fetch_orphan_check must be a number of seconds"),
    ("super_fetch_orphan_check", "1h", "super_fetch_orphan_check must be a number of seconds"),
    ("max_iteration_runtime", 0, "max_iteration_runtime must be a number of seconds > 0"),
    ("max_iteration_runtime", "10", "max_iteration_runtime must be a number of seconds > 0"),
    ("redis_idle_timeout", -1, "redis_idle_timeout must be a number of seconds > 0"),
    ("redis_idle_timeout", True, "redis_idle_timeout must be a number of seconds > 0"),
    ("queues", 5, "queues must be a list of queue names"),
    ("capsules", {"a": 1}, "capsules must map a name"),
])
def test_a_bad_value_names_the_setting(setting: str, value: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Config.from_mapping({setting: value})


def test_good_values_pass() -> None:
    config = Config.from_mapping({"log_level": "debug", "tag": "app", "leader": False,
                                  "labels": ["a"], "poll_interval_average": 0.5,
                                  "environment": None, "redis_url": None,
                                  "super_fetch_orphan_check": 600,
                                  "max_iteration_runtime": 300, "redis_idle_timeout": 60})
    assert config.log_level == "debug"
    assert (config.super_fetch_orphan_check, config.max_iteration_runtime,
            config.redis_idle_timeout) == (600, 300, 60)


SECONDS_SETTINGS = ("timeout", "shutdown_grace", "fetch_timeout", "paused_cache_ttl",
                    "average_scheduled_poll_interval", "heartbeat_interval", "dead_timeout",
                    "socket_timeout", "scheduler_initial_wait", "reaper_interval",
                    "loop_lag_warning", "periodic_catch_up", "poll_interval_average",
                    "control_interval", "log_slow_jobs_after", "leader_renew_interval",
                    "leader_check_interval", "periodic_poll_interval", "outbox_poll_interval",
                    "outbox_claim_timeout", "push_replica_timeout", "web_stream_interval",
                    "web_poll_interval",
                    "history_interval", "retain_history", "super_fetch_orphan_check",
                    "max_iteration_runtime", "redis_idle_timeout")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10 ** 400],
                         ids=["nan", "inf", "400-digits"])
@pytest.mark.parametrize("setting", SECONDS_SETTINGS)
def test_seconds_that_are_no_number_are_refused(setting: str, value: float) -> None:
    """YAML's .nan and .inf, click's FLOAT ("-t nan"): no comparison refuses them by itself,
    and a worker that took them waited forever to stop; 400 digits overflowed in a thread."""
    with pytest.raises(ConfigError, match=f"{setting} must be a number of seconds"):
        Config.from_mapping({setting: value})


@pytest.mark.parametrize("setting", [*SECONDS_SETTINGS, "job_timeout", "heartbeat_ttl"])
def test_seconds_longer_than_a_thread_can_wait_are_refused(setting: str) -> None:
    """``heartbeat_interval: 10000000000`` was taken, and the heartbeat thread died of an
    OverflowError at its first wait; ``heartbeat_ttl: 10**20`` made Redis refuse every
    beat: nothing is longer than ``threading.TIMEOUT_MAX``."""
    with pytest.raises(ConfigError, match=f"{setting} must be a number of seconds up to "):
        Config.from_mapping({setting: 10**10})
    with pytest.raises(ConfigError, match=f"{setting} must be a number of seconds up to "):
        Config.from_mapping({setting: 1e10})


def test_every_true_or_false_setting_is_type_checked() -> None:
    """A bool setting missing from the checked ones took any value from a file."""
    from dataclasses import fields

    from wurk.config import _FLAG_SETTINGS

    flags = {f.name for f in fields(Config) if f.init and f.type in ("bool", bool)}
    assert flags <= set(_FLAG_SETTINGS)


@pytest.mark.parametrize(("interval", "ttl"), [(120, 60), (60, 60), (45, 60), (2, 3)])
def test_a_heartbeat_interval_the_record_does_not_outlive_is_refused(interval: float,
                                                                     ttl: int) -> None:
    """``heartbeat_interval: 120`` (or 45 beside the 60 s ``heartbeat_ttl``) was taken: the
    process record expired between beats, so other processes' reapers took the live
    process's running jobs and ran them again, and its own processors stopped fetching once
    the last beat no longer vouched for the record, for part of every interval."""
    with pytest.raises(ConfigError, match=r"heartbeat_interval .* must be at most half of "
                                          r"heartbeat_ttl"):
        Config.from_mapping({"heartbeat_interval": interval, "heartbeat_ttl": ttl})
    Config.from_mapping({"heartbeat_interval": interval, "heartbeat_ttl": 2 * interval})
    Config.from_mapping({"heartbeat_interval": 30})  # half the default ttl: taken
