"""Registering periodic loops: in code and in the YAML file, every bad entry named, loop ids
that do not change when the same loop is registered again."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import wurk
from wurk.config import Config
from wurk.configfile import load_file
from wurk.errors import ConfigError


@wurk.job(name="PerCfg::Job")
def a_job(n: int) -> None:
    """Registered so loops can name it."""


def test_register_in_code_and_the_loop_id_rule() -> None:
    config = Config()
    loop = config.periodic.register("*/5 * * * *", a_job, args=[1], queue="low")
    again = config.periodic.register("*/5 * * * *", "PerCfg::Job", args=[1], queue="low")
    assert len(config.periodic) == 1 and again.lid == loop.lid
    text = '*/5 * * * *|PerCfg::Job|{"args":[1],"queue":"low"}'
    assert loop.lid == hashlib.sha1(text.encode()).hexdigest()[:16]
    zoned = config.periodic.register("*/5 * * * *", a_job, args=[1], queue="low",
                                     tz="Europe/Berlin")
    assert zoned.lid == hashlib.sha1(f"{text}|Europe/Berlin".encode()).hexdigest()[:16]
    assert loop.item({"retry": 3, "queue": "default"}) == {
        "retry": 3, "queue": "low", "class": "PerCfg::Job", "args": [1]}


def test_the_yaml_section(tmp_path: Path) -> None:
    path = tmp_path / "wurk.yml"
    path.write_text("""
concurrency: 2
periodic:
  - {cron: "@hourly", job: PerCfg::Job, args: [2], tz: America/New_York, retry: 2}
  - {cron: "0 3 * * *", job: PerCfg::Job, args: [3], options: {team: ops}}
""")
    config = Config.from_mapping(load_file(path), source=str(path))
    first, second = config.periodic.loops()
    assert (first.cron, first.tz, first.options) == ("@hourly", "America/New_York",
                                                     {"retry": 2, "args": [2]})
    assert second.options == {"team": "ops", "args": [3]}


def test_every_bad_yaml_entry_is_named_at_once(tmp_path: Path) -> None:
    path = tmp_path / "wurk.yml"
    path.write_text("""
periodic:
  - {cron: "61 * * * *", job: PerCfg::Job}
  - {cron: "* * * * *", job: PerCfg::Job, tz: Nowhere/Land}
  - {cron: "* * * * *", job: PerCfg::Job, tx: Europe/Berlin}
  - {job: PerCfg::Job}
  - {cron: "* * * * *", job: PerCfg::Job, args: 5}
  - {cron: "* * * * *", job: PerCfg::Job, queue: "a|b"}
  - just text
""")
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping(load_file(path), source=str(path))
    message = str(caught.value)
    assert message.startswith(str(path))
    for number, text in ((1, "Bad minute"), (2, "'Nowhere/Land' is not a known IANA zone"),
                         (3, "unknown key 'tx'"), (4, "needs cron:"), (5, "must be a list"),
                         (6, "reserves"), (7, "must be a mapping")):
        assert f"entry {number} " in message and text in message, text


@pytest.mark.parametrize(("options", "message"), [
    ({"jid": "x"}, "'jid' cannot be set"), ({"at": 5}, "'at' cannot be set"),
    ({"retry": "often"}, "option retry='often' is invalid"),
    ({"custom": {1, 2}}, "JSON"),
])
def test_bad_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config().periodic.register("* * * * *", a_job, **options)


def test_bad_jobs_and_args_are_refused() -> None:
    periodic = Config().periodic
    with pytest.raises(ConfigError, match=r"must be a @wurk\.job function"):
        periodic.register("* * * * *", object())
    with pytest.raises(ConfigError, match="must be a list"):
        periodic.register("* * * * *", a_job, args="abc")
    with pytest.raises(ConfigError, match="args of periodic loop"):
        periodic.register("* * * * *", a_job, args=[b"bytes"])


def test_unknown_job_names_are_named_when_checked() -> None:
    config = Config()
    config.periodic.register("* * * * *", "No::Such", args=[1])
    config.periodic.register("@daily", a_job)
    with pytest.raises(ConfigError, match="no job named 'No::Such' is registered") as caught:
        config.periodic.check_jobs(wurk.registry)
    assert "PerCfg::Job" not in str(caught.value)


def test_a_seconds_field_needs_its_setting_and_freezing_closes_registration() -> None:
    with pytest.raises(ConfigError, match="periodic_seconds_field"):
        Config().periodic.register("*/2 * * * * *", a_job)
    config = Config(periodic_seconds_field=True)
    config.periodic.register("*/2 * * * * *", a_job)
    config.freeze()
    with pytest.raises(ConfigError, match="frozen"):
        config.periodic.register("* * * * *", a_job)


@pytest.mark.parametrize(("setting", "value"), [
    ("leader_renew_interval", 0), ("leader_check_interval", -1), ("periodic_catch_up", -5),
    ("periodic_poll_interval", "soon"), ("periodic_seconds_field", "yes")])
def test_bad_settings_name_themselves(setting: str, value: object) -> None:
    with pytest.raises(ConfigError, match=setting):
        Config.from_mapping({setting: value})


@pytest.mark.parametrize("catch_up", [0, 0.5])
def test_a_catch_up_too_short_for_any_tick_is_refused(catch_up: float) -> None:
    # Each tick is pushed a few ms after it comes: a catch-up of 0 found every tick late,
    # pushed none, and warned of each as "missed while no process could push them".
    with pytest.raises(ConfigError, match="periodic_catch_up must be at least 1 s"):
        Config(periodic_catch_up=catch_up)
    assert Config(periodic_catch_up=1).periodic_catch_up == 1


@pytest.mark.parametrize(("raw", "expected"), [
    (b"1700000000", 1700000000), ("1700000000.75", 1700000000), (b"", None), ("soon", None),
    ("-5", None), ("0", None), ("nan", None), ("inf", None), ("1e400", None),
    ("99999999999999", None), (None, None), (b"\xff\xfe", None), (17, None)])
def test_stored_marks_are_read_or_refused(raw: object, expected: int | None) -> None:
    from wurk.periodic.loops import epoch_field

    assert epoch_field(raw) == expected


def test_periodic_tz_is_the_zone_of_every_loop_that_names_none(tmp_path: Path) -> None:
    """periodic.md: ``periodic_tz`` (Sidekiq Enterprise's ``mgr.tz``) is the default zone of
    the loops that give no ``tz``; a loop's own ``tz`` wins; a bad zone fails at load."""
    config = Config(periodic_tz="America/Chicago")
    loop = config.periodic.register("0 9 * * *", a_job)
    own = config.periodic.register("0 9 * * *", a_job, tz="Europe/Berlin")
    assert loop.tz == "America/Chicago" and own.tz == "Europe/Berlin"
    assert loop.lid == Config().periodic.register("0 9 * * *", a_job,
                                                  tz="America/Chicago").lid
    path = tmp_path / "wurk.yml"
    path.write_text("periodic_tz: Asia/Tokyo\n"
                    "periodic:\n  - {cron: '0 9 * * *', job: PerCfg::Job}\n")
    [from_file] = Config.from_mapping(load_file(path), source=str(path)).periodic.loops()
    assert from_file.tz == "Asia/Tokyo"
    with pytest.raises(ConfigError, match=r"periodic_tz.*Mars/Olympus"):
        Config(periodic_tz="Mars/Olympus")
    later = Config()  # set on the object after it was built: taken all the same
    later.periodic_tz = "Asia/Tokyo"
    assert later.periodic.register("0 9 * * *", a_job).tz == "Asia/Tokyo"
    with pytest.raises(ConfigError, match=r"periodic_tz.*Mars/Olympus"):
        later.periodic_tz = "Mars/Olympus"
